"""Network locations from Prometheus labels, the third source of host locations.

``[network] prometheus_query`` is a PromQL instant query (an LLDP exporter's neighbour
metric, a node_exporter textfile metric) whose series each say where one host sits:
the ``prometheus_host_label`` names the host (resolved to a Nova host like the
feature queries' host labels), ``prometheus_leaf_label`` its leaf, and optionally
``prometheus_spine_label`` the leaf's spine, ``prometheus_block_label`` its NVL block
and ``prometheus_uplink_label`` its uplink in Gbit/s. The series' values are ignored.

The prometheus sync source stores the result in ``network_locations`` and
``network_domains`` with source ``prometheus`` through
:func:`cortex.store.network.replace_source_rows`, replacing its previous rows and
never touching the rows of other sources. The sources rank aggregates, file,
Prometheus (:mod:`cortex.knowledge.network`), so:

- a host the topology file places is not stored again (``placed_by_file``);
- a leaf or spine the file defines keeps the file's attributes, Prometheus only adds
  hosts to it; aggregates are applied over all of this when the view is built.

Bad data is skipped, never fatal, and counted in the run's detail with a log line per
skipped series or host: a series without the host or leaf label (or the spine label,
when one is configured), or with an uplink that is not a positive number, is
*malformed*; a host whose series disagree (two leaves: a dual-homed host), a host
whose leaf's other hosts agree on different spine/block/uplink values (the most
common values win; a tie goes to the first in sort order), and a name used both as a
leaf and as a spine (the file's use of a name stands; among Prometheus names alone,
both hosts are skipped) are *conflicting*. The replacement happens in the sync run's
one transaction: a failed run leaves the previous rows as they were.
"""

from __future__ import annotations

import logging
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cortex.conf import Config, ConfigError

LOG = logging.getLogger(__name__)
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")  # Prometheus's label name rule


@dataclass(frozen=True)
class NetworkQuery:
    """The ``[network] prometheus_*`` options: the query and the label names it maps.

    ``spine_label``, ``block_label`` and ``uplink_label`` may be empty (not mapped).
    """

    query: str
    host_label: str
    leaf_label: str
    spine_label: str = ""
    block_label: str = ""
    uplink_label: str = ""

    @classmethod
    def from_conf(cls, conf: Config) -> NetworkQuery | None:
        """The configured query, or None when ``prometheus_query`` is empty (the default).

        Raises ConfigError naming the option when the host or leaf label is empty or a
        label is not a valid Prometheus label name.
        """
        query = conf.get("network", "prometheus_query").strip()
        if not query:
            return None
        labels = {}
        for name in ("host", "leaf", "spine", "block", "uplink"):
            option = f"prometheus_{name}_label"
            value = conf.get("network", option).strip()
            if not value and name in ("host", "leaf"):
                raise ConfigError(f"[network] {option} is required when prometheus_query "
                                  "is set")
            if value and not LABEL_NAME.match(value):
                raise ConfigError(f"[network] {option}: {value!r} is not a Prometheus "
                                  "label name")
            labels[f"{name}_label"] = value
        return cls(query, **labels)


@dataclass(frozen=True)
class SeriesLocation:
    """Where one series puts one host: leaf and spine names, NVL block, uplink Gbit/s."""

    host: str
    leaf: str
    spine: str | None
    block: str | None
    uplink_gbps: float | None

    @property
    def domain(self) -> tuple[str | None, str | None, float | None]:
        """What the series says about its leaf: ``(spine, block, uplink_gbps)``."""
        return self.spine, self.block, self.uplink_gbps


@dataclass
class Skipped:
    """Series or hosts left out of a run, by kind, with one reason line each."""

    malformed: int = 0
    conflicting: int = 0

    def skip(self, kind: str, reason: str) -> None:
        """Count one skip of ``kind`` (``malformed``, ``conflicting``) and log why."""
        setattr(self, kind, getattr(self, kind) + 1)
        LOG.warning("network location from prometheus skipped (%s): %s", kind, reason)


def parse_series(query: NetworkQuery, metric: Mapping[str, str],
                 resolve: Callable[[str], str], skipped: Skipped) -> SeriesLocation | None:
    """The location one series' labels give, or None (counted as malformed) when unusable."""
    missing = [label for label in (query.host_label, query.leaf_label, query.spine_label)
               if label and not metric.get(label)]
    if missing:
        skipped.skip("malformed", f"series {_labels(metric)} has no {missing[0]} label")
        return None
    uplink = None
    if query.uplink_label and metric.get(query.uplink_label):
        try:
            uplink = float(metric[query.uplink_label])
        except ValueError:
            uplink = math.nan
        if not (math.isfinite(uplink) and uplink > 0):
            skipped.skip("malformed", f"series {_labels(metric)}: {query.uplink_label} is "
                                      "not a positive number of Gbit/s")
            return None
    return SeriesLocation(resolve(metric[query.host_label]), metric[query.leaf_label],
                          metric.get(query.spine_label) if query.spine_label else None,
                          metric.get(query.block_label) or None if query.block_label else None,
                          uplink)


def resolve_locations(found: Iterable[SeriesLocation], earlier_hosts: set[str],
                      earlier_domains: Mapping[str, str],
                      skipped: Skipped) -> tuple[dict[str, SeriesLocation], int]:
    """One location per host from the parsed series; ``(locations by host, placed_by_file)``.

    ``earlier_hosts``: hosts an earlier stored source (the file) places, left out and
    counted; ``earlier_domains``: ``{name: kind}`` of the domains it defines. Conflicts
    are counted in ``skipped`` (see the module docstring).
    """
    by_host: dict[str, set[SeriesLocation]] = {}
    for location in found:
        if earlier_domains.get(location.leaf) == "leaf":  # the file's leaf: its values win
            location = SeriesLocation(location.host, location.leaf, None, None, None)
        by_host.setdefault(location.host, set()).add(location)
    placed_earlier = 0
    single: dict[str, SeriesLocation] = {}
    for host, locations in sorted(by_host.items()):
        if host in earlier_hosts:
            placed_earlier += 1
        elif len(locations) > 1:
            skipped.skip("conflicting", f"host {host}: series disagree: " + "; ".join(
                sorted(f"leaf {x.leaf} spine {x.spine} block {x.block} uplink {x.uplink_gbps}"
                       for x in locations)))
        else:
            single[host] = next(iter(locations))
    by_leaf: dict[str, list[SeriesLocation]] = {}
    for location in single.values():
        by_leaf.setdefault(location.leaf, []).append(location)
    agreed: dict[str, SeriesLocation] = {}
    for leaf, locations in by_leaf.items():
        votes = Counter(x.domain for x in locations)
        winner = min(votes, key=lambda d: (-votes[d], repr(d)))
        for location in locations:
            if location.domain == winner:
                agreed[location.host] = location
            else:
                skipped.skip("conflicting", f"host {location.host}: leaf {leaf} is "
                             f"(spine, block, uplink) {winner} on its other hosts, "
                             f"{location.domain} here")
    result = {}
    for host, location in sorted(agreed.items()):  # the earlier source's names stand
        if earlier_domains.get(location.leaf) == "spine" or \
                earlier_domains.get(location.spine or "") == "leaf":
            skipped.skip("conflicting", f"host {host}: leaf {location.leaf} spine "
                         f"{location.spine}: the topology file has them the other way round")
        else:
            result[host] = location
    both = {x.leaf for x in result.values()} & {x.spine for x in result.values()}
    for host, location in list(result.items()):  # Prometheus alone: neither can be told
        if location.leaf in both or location.spine in both:
            skipped.skip("conflicting", f"host {host}: "
                         f"{location.leaf if location.leaf in both else location.spine} "
                         "names both a leaf and a spine")
            del result[host]
    return result, placed_earlier


def _labels(metric: Mapping[str, str]) -> str:
    """``{a="1",b="2"}`` for log lines."""
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(metric.items())) + "}"


def domain_rows(locations: Mapping[str, SeriesLocation], earlier_domains: Mapping[str, str],
                source: str) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """``(domains by name, locations by host)``: the rows of ``source``, without timestamps.

    Leaves and spines an earlier source defines get no row of their own: its rows win.
    """
    domains: dict[str, dict[str, Any]] = {}
    for location in locations.values():
        if location.leaf not in earlier_domains:
            domains[location.leaf] = {"kind": "leaf", "spine": location.spine,
                                      "block": location.block,
                                      "uplink_gbps": location.uplink_gbps,
                                      "adjacent": None, "source": source}
        if location.spine and location.spine not in earlier_domains:
            domains[location.spine] = {"kind": "spine", "spine": None, "block": None,
                                       "uplink_gbps": None, "adjacent": None, "source": source}
    hosts = {host: {"leaf": x.leaf, "source": source} for host, x in locations.items()}
    return domains, hosts
