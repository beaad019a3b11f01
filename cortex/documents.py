"""YAML documents read from files: one loader for every file Cortex reads.

PyYAML's safe loader, through libyaml's C implementation where PyYAML was built
with it (``yaml.CSafeLoader``, about ten times faster than the pure-Python one, which
is the fallback). Both accept exactly the same documents: no Python object tags.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_yaml(text: str) -> Any:
    """The document in ``text`` (YAML, so JSON too); ``yaml.YAMLError`` if it is not one."""
    return yaml.load(text, Loader=_LOADER)  # noqa: S506 - a safe loader


def load_yaml(path: str | Path) -> Any:
    """The document in the file ``path``; OSError if unreadable, yaml.YAMLError if invalid."""
    return parse_yaml(Path(path).read_text())
