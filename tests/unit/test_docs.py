"""The README stays short, every command states its extras, the docs carry no work log."""

from __future__ import annotations

import configparser
import importlib
import re

import pytest

from tests.conftest import REPO

SETUP = configparser.ConfigParser()
SETUP.read(REPO / "setup.cfg")
SCRIPTS = [line.split("=", 1) for line in
           SETUP.get("options.entry_points", "console_scripts").strip().splitlines()]
EXTRAS = {name for name, _ in SETUP.items("options.extras_require")}
# what a development log says: an issue's number, the Nth round of work
WORK_LOG = re.compile(r"\bissue \d|\b(first|second|third|fourth|fifth|sixth|seventh|"
                      r"eighth|ninth|tenth|eleventh|twelfth|thirteenth|\d+(st|nd|rd|th)) "
                      r"pass\b", re.I)


def test_the_readme_is_short():
    assert len((REPO / "README.md").read_text().splitlines()) <= 300


@pytest.mark.parametrize("script, target", SCRIPTS, ids=[s.strip() for s, _ in SCRIPTS])
def test_every_command_states_the_extras_it_needs(script, target, capsys):
    module = importlib.import_module(target.strip().split(":")[0])
    with pytest.raises(SystemExit):
        module.build_parser().parse_args(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "Install: " in help_text
    named = set(re.findall(r"cortex-scheduler\[(\w+)\]", help_text))
    named |= set(re.findall(r"\b(\w+) extras?\b", help_text))
    assert "base package" in help_text or named & EXTRAS, help_text


@pytest.mark.parametrize("page", ["README.md", *sorted(
    str(p.relative_to(REPO)) for p in (REPO / "docs").rglob("*.md"))])
def test_no_development_log_in_the_documentation(page):
    found = [line for line in (REPO / page).read_text().splitlines() if WORK_LOG.search(line)]
    assert not found, found


PATH_NAMED = re.compile(r"(?<![\w/.-])((?:cortex|tests|bench|etc|migrations|docs)/[A-Za-z0-9_./-]+"
                        r"\.(?:py|yaml|json|sh|csv|md))\b")


@pytest.mark.parametrize("page", ["README.md", *sorted(
    str(p.relative_to(REPO)) for p in (REPO / "docs").rglob("*.md"))])
def test_every_path_the_documentation_names_exists(page):
    missing = {path for path in PATH_NAMED.findall((REPO / page).read_text())
               if not (REPO / path).exists()}
    assert not missing, missing
