"""Name -> plugin class: a decorator for in-tree plugins, entry points for the rest.

In-tree plugins register with ``@register`` when their module is imported
(:func:`load_in_tree` imports them all). Out-of-tree packages declare classes in
the entry-point groups ``cortex.filters``, ``cortex.weighers`` and (the descheduler's)
``cortex.detectors``.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
from importlib.metadata import entry_points
from typing import Any, TypeVar

from cortex.plugins.base import Detector, Filter, Plugin, Weigher

P = TypeVar("P", bound=type[Plugin] | type[Detector])

LOG = logging.getLogger(__name__)
#: Former plugin names still accepted in pipelines.yaml, with a warning: old -> new.
DEPRECATED_NAMES = {"weigher_pool_utilisation": "weigher_pool_utilization"}
FILTERS: dict[str, type[Filter]] = {}
WEIGHERS: dict[str, type[Weigher]] = {}
DETECTORS: dict[str, type[Detector]] = {}
ENTRY_POINT_GROUPS: dict[str, dict[str, Any]] = {
    "cortex.filters": FILTERS, "cortex.weighers": WEIGHERS, "cortex.detectors": DETECTORS}
_BASES: dict[str, Any] = {"cortex.filters": Filter, "cortex.weighers": Weigher,
                           "cortex.detectors": Detector}


class PluginError(LookupError):
    """An unknown plugin name, or a class that is not a Filter, Weigher or Detector."""


def register(cls: P) -> P:
    """Class decorator: add ``cls`` under ``cls.name`` to FILTERS, WEIGHERS or DETECTORS."""
    if not cls.name:
        raise PluginError(f"{cls!r} must be a Filter, Weigher or Detector with a name")
    if issubclass(cls, Filter):
        _add(FILTERS, cls)
    elif issubclass(cls, Weigher):
        _add(WEIGHERS, cls)
    elif issubclass(cls, Detector):
        _add(DETECTORS, cls)
    else:
        raise PluginError(f"{cls!r} must be a Filter, Weigher or Detector with a name")
    return cls


def _add(table: dict[str, Any], cls: type[Plugin] | type[Detector]) -> None:
    """Put ``cls`` in ``table`` under its name; PluginError for a name taken by another."""
    existing = table.get(cls.name)
    if existing is not None and existing is not cls:
        raise PluginError(f"plugin name {cls.name!r} registered twice")
    table[cls.name] = cls


def load_in_tree() -> None:
    """Import every module of cortex.plugins.filters, .weighers and .detectors."""
    for package in ("cortex.plugins.filters", "cortex.plugins.weighers",
                    "cortex.plugins.detectors"):
        module = importlib.import_module(package)
        for info in pkgutil.iter_modules(module.__path__):
            importlib.import_module(f"{package}.{info.name}")


def load_entry_points() -> None:
    """Register the classes of the ``cortex.filters``/``.weighers``/``.detectors`` entry points."""
    for group in ENTRY_POINT_GROUPS:
        base = _BASES[group]
        for ep in entry_points(group=group):
            loaded = ep.load()
            if not (isinstance(loaded, type) and issubclass(loaded, base)):
                raise PluginError(f"entry point {group}:{ep.name} is not a {base.__name__}")
            cls: Any = loaded
            if not cls.name:
                cls.name = ep.name
            register(cls)


def load_all() -> None:
    """In-tree plugins, then entry points (idempotent)."""
    load_in_tree()
    load_entry_points()


def lookup(kind: str, name: str) -> Any:
    """The class registered as ``name`` (kind ``filter``, ``weigher`` or ``detector``).

    PluginError if none.
    """
    tables: dict[str, dict[str, Any]] = {"filter": FILTERS, "weigher": WEIGHERS,
                                         "detector": DETECTORS}
    table = tables[kind]
    if name in DEPRECATED_NAMES:
        LOG.warning("%s %s is deprecated: use %s", kind, name, DEPRECATED_NAMES[name])
        name = DEPRECATED_NAMES[name]
    try:
        return table[name]
    except KeyError:
        raise PluginError(f"unknown {kind} {name!r} (known: {', '.join(sorted(table))})"
                          ) from None
