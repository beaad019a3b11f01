"""The first hour of a new user: the README's test command, what it installs, its failures."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def _readme_test_command() -> str:
    """The shell block that follows 'Run the test suite' in the README."""
    text = (REPO / "README.md").read_text()
    after = text[text.index("Run the test suite"):]
    return re.search(r"```sh\n(.+?)\n```", after, re.S).group(1).strip()


def test_ci_runs_exactly_the_readme_test_command():
    command = _readme_test_command()
    ci = [line for line in (REPO / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.startswith(("#", "set ", "cd "))]
    assert ci == [command]


def test_the_test_command_installs_the_servers_the_suite_needs(tmp_path):
    # a PATH with the shell's tools but no prometheus, promtool or chromium
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "id", "python3"):
        os.symlink(shutil.which(tool), bin_dir / tool)
    done = subprocess.run(["bash", str(REPO / "tests" / "run.sh"), "--list-missing"],
                          env={"PATH": str(bin_dir), "HOME": str(tmp_path)},
                          capture_output=True, text=True, check=True)
    assert {"prometheus", "chromium"} <= set(done.stdout.split())
    script = (REPO / "tests" / "run.sh").read_text()
    assert "packages+=(postgresql)" in script and "real_servers.py prepare" in script


def test_an_unreachable_test_database_ends_the_run_in_one_line(tmp_path):
    env = {**os.environ,
           "CORTEX_TEST_DATABASE_URL": "postgresql+psycopg://postgres:hunter2@127.0.0.1:1/x"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/db/test_cache.py"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    lines = [line for line in done.stdout.splitlines() if "unreachable" in line]
    assert len(lines) == 1, done.stdout
    assert "127.0.0.1:1" in lines[0] and "hunter2" not in done.stdout
    assert "passed" not in done.stdout and "SQLite" not in lines[0].split(":")[0]


def test_the_quick_subset_is_declared_named_and_leaves_out_only_what_exists():
    from tests.conftest import SLOW_PATHS

    assert "bash tests/run.sh -m quick" in (REPO / "README.md").read_text()
    assert '"quick:' in (REPO / "pyproject.toml").read_text()
    for path in SLOW_PATHS:  # a renamed slow file must not turn quick unnoticed
        assert (REPO / path).exists(), path


def test_the_quick_marker_is_set_on_every_test_outside_the_slow_paths(request):
    from tests.conftest import SLOW_PATHS

    this = request.node
    assert this.get_closest_marker("quick") is not None
    session_items = request.session.items
    slow = [i for i in session_items
            if Path(i.fspath).resolve().relative_to(REPO).as_posix().startswith(SLOW_PATHS)]
    assert all(i.get_closest_marker("quick") is None for i in slow)
