"""YAML documents read from files and checked against their JSON Schema.

One loader for every file Cortex reads: PyYAML's safe loader, through libyaml's C
implementation where PyYAML was built with it (``yaml.CSafeLoader``, about ten times
faster than the pure-Python one, which is the fallback). Both accept exactly the same
documents: no Python object tags. One check: jsonschema's Draft 2020-12 validator, its
most relevant error (``best_match``) named by where it is in the document.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_yaml(text: str) -> Any:
    """The document in ``text`` (YAML, so JSON too); ``yaml.YAMLError`` if it is not one."""
    return yaml.load(text, Loader=_LOADER)  # noqa: S506 - a safe loader


def load_yaml(path: str | Path) -> Any:
    """The document in the file ``path``; OSError if unreadable, yaml.YAMLError if invalid."""
    return parse_yaml(Path(path).read_text())


def schema_problem(document: Any, schema: Mapping[str, Any]) -> str | None:
    """``"<where>: <message>"`` of the most relevant way ``document`` breaks ``schema``.

    ``where`` is the path into the document (``pipelines/p/filters/0``), ``(top)`` for
    the document itself. None when it conforms.
    """
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(schema).iter_errors(document))
    if error is None:
        return None
    return f"{'/'.join(str(p) for p in error.absolute_path) or '(top)'}: {error.message}"


def check_document(document: Any, schema: Mapping[str, Any], source: str,
                   error: type[Exception]) -> Any:
    """``document`` when it conforms to ``schema``; else ``error("<source>: <where>: ...")``."""
    problem = schema_problem(document, schema)
    if problem is not None:
        raise error(f"{source}: {problem}")
    return document


def load_document(path: str | Path, schema: Mapping[str, Any], error: type[Exception],
                  empty: Any = None) -> Any:
    """The YAML file ``path``, checked against ``schema``; ``error`` with the file's name.

    An unreadable file or invalid YAML raises ``error("<path>: <reason>")``, a document
    that breaks the schema ``error("<path>: <where>: <message>")``. ``empty``: the
    document an empty file stands for (None: an empty file is ``null``).
    """
    try:
        document = load_yaml(path)
    except (OSError, yaml.YAMLError) as exc:
        raise error(f"{path}: {exc}") from None
    if document is None and empty is not None:
        document = empty
    return check_document(document, schema, str(path), error)
