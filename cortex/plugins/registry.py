"""Name -> plugin class: a decorator for in-tree plugins, entry points for the rest.

In-tree plugins register with ``@register`` when their module is imported
(:func:`load_in_tree` imports them all). Out-of-tree packages declare classes in
the entry-point groups ``cortex.filters`` and ``cortex.weighers``.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
from importlib.metadata import entry_points
from typing import Any, TypeVar

from cortex.plugins.base import Filter, Plugin, Weigher

P = TypeVar("P", bound=type[Plugin])

LOG = logging.getLogger(__name__)
#: Former plugin names still accepted in pipelines.yaml, with a warning: old -> new.
DEPRECATED_NAMES = {"weigher_pool_utilisation": "weigher_pool_utilization"}
FILTERS: dict[str, type[Filter]] = {}
WEIGHERS: dict[str, type[Weigher]] = {}
ENTRY_POINT_GROUPS = {"cortex.filters": FILTERS, "cortex.weighers": WEIGHERS}


class PluginError(LookupError):
    """An unknown plugin name, or a class that is not a Filter/Weigher."""


def register(cls: P) -> P:
    """Class decorator: add ``cls`` under ``cls.name`` to FILTERS or WEIGHERS."""
    if not cls.name:
        raise PluginError(f"{cls!r} must be a Filter or Weigher with a name")
    if issubclass(cls, Filter):
        _add(FILTERS, cls)
    elif issubclass(cls, Weigher):
        _add(WEIGHERS, cls)
    else:
        raise PluginError(f"{cls!r} must be a Filter or Weigher with a name")
    return cls


def _add(table: dict[str, Any], cls: type[Plugin]) -> None:
    """Put ``cls`` in ``table`` under its name; PluginError for a name taken by another."""
    existing = table.get(cls.name)
    if existing is not None and existing is not cls:
        raise PluginError(f"plugin name {cls.name!r} registered twice")
    table[cls.name] = cls


def load_in_tree() -> None:
    """Import every module of cortex.plugins.filters and cortex.plugins.weighers."""
    for package in ("cortex.plugins.filters", "cortex.plugins.weighers"):
        module = importlib.import_module(package)
        for info in pkgutil.iter_modules(module.__path__):
            importlib.import_module(f"{package}.{info.name}")


def load_entry_points() -> None:
    """Register the classes of the ``cortex.filters``/``cortex.weighers`` entry points."""
    for group, table in ENTRY_POINT_GROUPS.items():
        base = Filter if table is FILTERS else Weigher
        for ep in entry_points(group=group):
            cls = ep.load()
            if not (isinstance(cls, type) and issubclass(cls, base)):
                raise PluginError(f"entry point {group}:{ep.name} is not a {base.__name__}")
            if not cls.name:
                cls.name = ep.name
            register(cls)


def load_all() -> None:
    """In-tree plugins, then entry points (idempotent)."""
    load_in_tree()
    load_entry_points()


def lookup(kind: str, name: str) -> type[Plugin]:
    """The class registered as ``name`` (kind ``filter`` or ``weigher``); PluginError if none."""
    table = FILTERS if kind == "filter" else WEIGHERS
    if name in DEPRECATED_NAMES:
        LOG.warning("%s %s is deprecated: use %s", kind, name, DEPRECATED_NAMES[name])
        name = DEPRECATED_NAMES[name]
    try:
        return table[name]
    except KeyError:
        raise PluginError(f"unknown {kind} {name!r} (known: {', '.join(sorted(table))})"
                          ) from None
