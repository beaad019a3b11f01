"""ruff (the pep8 tox env) runs with the tests too, so CI enforces style and docstrings."""

import subprocess
import sys

from tests.conftest import REPO


def test_ruff_is_clean():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "cortex", "migrations",
                             "tests", "bench"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
