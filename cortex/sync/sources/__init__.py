"""The sync sources, one module per service; :func:`build_sources` makes them from conf."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from cortex.conf import Config
from cortex.sync.source import Source

OPENSTACK_SOURCES = ("nova", "placement", "cinder", "manila", "keystone")


def enabled_sources(conf: Config) -> tuple[str, ...]:
    """The names in ``[sync] sources``, or the default set (the names are checked at load)."""
    raw = conf.get("sync", "sources")
    if not raw.strip():
        return OPENSTACK_SOURCES + (("prometheus",) if conf.get("prometheus", "url") else ())
    return tuple(dict.fromkeys(n.strip() for n in raw.split(",") if n.strip()))


def build_sources(conf: Config, names: tuple[str, ...],
                  cloud: Callable[[], Any] | None = None) -> list[Source]:
    """Source objects for ``names``; OpenStack ones share one lazily made connection.

    ``cloud`` (tests, benchmarks) returns an openstacksdk connection; default:
    :func:`cortex.sync.openstack.connect` on ``conf``, made on first use.
    """
    from cortex.sync.openstack import connect
    from cortex.sync.sources.keystone import KeystoneSource
    from cortex.sync.sources.nova import NovaSource
    from cortex.sync.sources.placement import PlacementSource
    from cortex.sync.sources.prometheus import PrometheusSource
    from cortex.sync.sources.storage import CinderSource, ManilaSource

    # reading processes connect by themselves, from conf: only where no cloud is given
    reader_connect = functools.partial(connect, conf) if cloud is None else None
    cloud = cloud or functools.cache(lambda: connect(conf))
    changes = (conf.get("sync", "full_sync_interval"), conf.get("sync", "changes_since_overlap"))
    makers: dict[str, Callable[[], Source]] = {
        "nova": lambda: NovaSource(cloud, *changes),
        "placement": lambda: PlacementSource(
            cloud, conf.get("sync", "concurrency"), *changes,
            processes=conf.get("sync", "placement_processes"), connect=reader_connect),
        "cinder": lambda: CinderSource(cloud),
        "manila": lambda: ManilaSource(cloud),
        "keystone": lambda: KeystoneSource(cloud),
        "prometheus": lambda: PrometheusSource.from_conf(conf),
        "forecast": lambda: _forecast_source(conf),
    }
    return [makers[name]() for name in names]


def _forecast_source(conf: Config) -> Source:
    """The forecast source, imported only when asked for (numpy and statsmodels)."""
    from cortex.sync.sources.forecast import ForecastSource

    return ForecastSource.from_conf(conf)


def interval(conf: Config, name: str) -> float:
    """Seconds between runs of source ``name``: its own option, else ``[sync] interval``."""
    return conf.get("sync", f"{name}_interval") or conf.get("sync", "interval")
