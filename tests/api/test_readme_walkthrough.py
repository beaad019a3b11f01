"""The README's walkthrough, run: its samples are the real output of its own commands.

Every ``sh`` block of the README, then of the docs pages that go on from it
(:data:`PAGES`), that shows output after a ``curl`` posting a bundled body to a
scheduler endpoint, or after ``cortex-manage decisions list|explain``, is replayed on the
demo fleet (as ``cortex-api --demo`` serves it) in that order, and its output compared
line by line. Only times and decision ids differ from run to run.
"""

import json
import re
import shlex

import pytest

from cortex.api.app import create_app
from cortex.cmd import manage
from tests.api.conftest import make_conf
from tests.conftest import REPO, demo_sqlite

#: The pages whose samples run on one demo database, in this order.
PAGES = ("README.md", "docs/scheduler/explain.md")
VOLATILE = [(re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z?"), "<time>"),
            (re.compile(r"^Decision [0-9a-f-]{36}"), "Decision <id>")]


def normalise(text: str) -> list[str]:
    lines = []
    for line in text.rstrip("\n").splitlines():
        for pattern, replacement in VOLATILE:
            line = pattern.sub(replacement, line)
        lines.append(line.rstrip())
    return lines


def samples() -> list[tuple[list[str], list[str]]]:
    """(command argv, expected output lines) of every replayable block, in page order."""
    found = []
    text = "\n".join((REPO / page).read_text() for page in PAGES)
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        lines = block.rstrip("\n").splitlines()
        command = []
        while lines:
            line = lines.pop(0).split("  #")[0]
            command.append(line.rstrip(" \\"))
            if not line.rstrip().endswith("\\"):
                break
        argv = shlex.split(" ".join(command))
        replayable = (argv[:1] == ["curl"] and any(a.startswith("@tests/fixtures/") for a in argv)
                      or argv[:2] in (["cortex-manage", "decisions"], ["cortex-manage", "explain"])
                      or argv[:1] == [".venv/bin/cortex-manage"])
        if replayable and lines:
            found.append((argv, lines))
    return found


def test_the_readme_has_samples_to_check():
    commands = [" ".join(argv[:3]) for argv, _ in samples()]
    assert sum(c.startswith("curl") for c in commands) >= 2
    assert any("decisions list" in c for c in commands)
    assert sum("explain" in c for c in commands) >= 2


def test_every_sample_is_what_the_command_prints(tmp_path, monkeypatch, capsys):
    url, engine = demo_sqlite(tmp_path / "cortex.sqlite")
    # as cortex-api --demo runs: reservations on, so the GPU VM's promise counts next
    app = create_app(make_conf(**{"database.connection": url,
                                  "scheduler.reservation_ttl": 300.0}), engine=engine)
    client = app.test_client()
    monkeypatch.setenv("CORTEX_DATABASE_CONNECTION", url)
    monkeypatch.delenv("CORTEX_CONFIG_FILE", raising=False)
    try:
        for argv, expected in samples():
            if argv[0] == "curl":
                body = next(a[1:] for a in argv if a.startswith("@"))
                path = "/" + argv[-1].split("/", 3)[3]
                answer = client.post(path, data=(REPO / body).read_bytes(),
                                     content_type="application/json")
                got = json.dumps(answer.get_json(), separators=(",", ":"))
                app.extensions["cortex"].decisions.flush()
            else:
                capsys.readouterr()
                assert manage.main(argv[1:]) == 0
                got = capsys.readouterr().out
            assert normalise(got) == normalise("\n".join(expected)), " ".join(argv)
    finally:
        app.extensions["cortex"].decisions.close()


@pytest.mark.parametrize("text", ["2026-11-24T11:42:53Z", "2026-11-24T11:42:53.821169"])
def test_times_are_the_only_thing_masked(text):
    assert normalise(f"at {text} cmp0001") == ["at <time> cmp0001"]
    assert normalise("cmp0001 cmp0002") == ["cmp0001 cmp0002"]
