"""The documentation site builds with warnings as errors, its references generated whole.

``sphinx-build -W -b html docs OUT`` (the ``docs`` extra), as a reader builds it; then
the generated reference pages must name every configuration option, every path of
``cortex/api/openapi.yaml``, every console script and every in-tree plugin.
"""

from __future__ import annotations

import html
import re
import subprocess
import sys

import yaml

from cortex import conf
from cortex.plugins.registry import DETECTORS, FILTERS, WEIGHERS, load_in_tree
from tests.conftest import REPO


def text(path) -> str:
    """The words of one built HTML page, without tags."""
    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text()))


def test_the_site_builds_without_warnings_and_covers_the_code(tmp_path):
    out = tmp_path / "html"
    result = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q",
                             "-b", "html", str(REPO / "docs"), str(out)],
                            capture_output=True, text=True, timeout=600, cwd=REPO)
    assert result.returncode == 0, result.stderr[-4000:]

    configuration = text(out / "reference" / "configuration.html")
    for option in conf.OPTIONS:
        assert conf.env_name(option) in configuration, option
    api = text(out / "reference" / "rest-api.html")
    spec = yaml.safe_load((REPO / "cortex" / "api" / "openapi.yaml").read_text())
    for path in spec["paths"]:
        assert path in api, path
    cli = text(out / "reference" / "cli.html")
    for script in ("cortex-api", "cortex-manage", "cortex-sync", "cortex-descheduler",
                   "cortex-agent"):
        assert f"usage: {script}" in cli, script
    plugins = text(out / "reference" / "plugins.html")
    load_in_tree()
    for registry in (FILTERS, WEIGHERS, DETECTORS):
        for name, plugin in registry.items():
            if plugin.__module__.startswith("cortex.plugins."):  # not tests' own plugins
                assert name in plugins, name
    index = text(out / "index.html")
    for page in sorted((REPO / "docs").glob("*.md")):  # every topic page is in the site
        assert (out / f"{page.stem}.html").exists(), page.name
    assert "Install and operate" in index
