"""docs/architecture.md names paths that exist, and docs/dependencies.md is the code's."""

import re
import subprocess
import sys

from tests.conftest import REPO

DOCS = REPO / "docs"


def test_every_path_the_architecture_page_names_exists():
    text = (DOCS / "architecture.md").read_text()
    paths = set(re.findall(r"`((?:cortex|etc|tests|docs)/[\w/.-]+)`", text))
    assert len(paths) > 20
    missing = sorted(p for p in paths if not (REPO / p).exists())
    assert missing == []


def test_the_dependency_diagram_is_the_one_the_code_draws():
    drawn = subprocess.run([sys.executable, str(DOCS / "dependencies.py")], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout
    assert "scheduler --> pipeline" in drawn
    assert (DOCS / "dependencies.md").read_text() == drawn, \
        "run: python docs/dependencies.py > docs/dependencies.md"
