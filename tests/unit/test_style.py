"""ruff (the pep8 tox env) runs with the tests too, so CI enforces style and docstrings."""

import subprocess
import sys

from tests.conftest import REPO


def test_ruff_is_clean():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "cortex", "migrations",
                             "tests", "bench", "docs"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_typed_core_type_checks():
    """mypy holds every plugin to the contract's Protocols and the rules to their types.

    The files are pyproject.toml's ``[tool.mypy] files``: plugins, rules, pipeline,
    scheduler, decision and requests.
    """
    result = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental"], cwd=REPO,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
