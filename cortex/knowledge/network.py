"""Network topology of the fleet: each host's place in the leaf/spine fabric.

A host's network location is a path of domains from the top down: its ``spine``, its
``leaf`` (the top-of-rack switch, a rack) and optionally a ``block`` (an NVLink/NVL
domain spanning hosts). Sources, first match wins per host:

1. host aggregate metadata: an aggregate whose metadata has the leaf key
   (``topology:leaf`` by default; ``topology:spine``, ``topology:block`` and
   ``topology:uplink_gbps`` alongside) places its member hosts;
2. the topology file (``etc/cortex/network-topology.yaml``, loaded into the knowledge
   tables by ``cortex-manage network load``): spines, leaves with their hosts, uplink
   bandwidth and which leaves are adjacent;
3. Prometheus labels (``[network] prometheus_query`` and its label options, stored by
   the prometheus sync source, see :mod:`cortex.sync.sources.prometheus_network`):
   leaves, spines, NVL blocks and uplinks as the series' labels name them; a leaf the
   file defines keeps the file's spine, block, uplink and adjacency.

Adjacency: two leaves are adjacent when the file says so; a leaf the file gives no
adjacency for is adjacent to every leaf under the same spine (in a two-tier leaf/spine
fabric every such pair is one spine hop apart). Everything here is pure: no database,
so the simulator uses it as the API does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from cortex.documents import check_document, load_document

SOURCE_AGGREGATE = "aggregate"
SOURCE_FILE = "file"
SOURCE_PROMETHEUS = "prometheus"  # the prometheus sync source's name, which stores the rows


class NetworkTopologyError(ValueError):
    """A topology file or document that cannot be used; the message says where and why."""


@dataclass(frozen=True)
class MetadataKeys:
    """Aggregate metadata keys naming a host's domains (``[network]`` options)."""

    spine: str = "topology:spine"
    leaf: str = "topology:leaf"
    block: str = "topology:block"
    uplink_gbps: str = "topology:uplink_gbps"

    @classmethod
    def from_conf(cls, conf: Any) -> MetadataKeys:
        """The keys of the ``[network]`` options of a cortex.conf.Config."""
        return cls(*(conf.get("network", name)
                     for name in ("spine_key", "leaf_key", "block_key", "uplink_key")))


@dataclass(frozen=True, slots=True)
class NetworkLocation:
    """Where a host sits: ``spine`` and ``leaf`` names, optional ``block``, and the source."""

    host: str
    spine: str | None
    leaf: str
    block: str | None
    source: str


@dataclass(frozen=True, slots=True)
class LeafDomain:
    """A leaf (rack) domain: spine, hosts, adjacent leaves, uplink Gbit/s (None: unknown)."""

    name: str
    spine: str | None
    hosts: tuple[str, ...]
    adjacent: frozenset[str]
    uplink_gbps: float | None
    source: str


@dataclass(frozen=True, slots=True)
class NetworkTopology:
    """The fabric as the scheduler sees it: ``locations`` by host, ``leaves`` by name.

    ``spines`` maps a spine name to its uplink bandwidth in Gbit/s (None: unknown).
    """

    locations: Mapping[str, NetworkLocation] = field(
        default_factory=lambda: MappingProxyType({}))
    leaves: Mapping[str, LeafDomain] = field(default_factory=lambda: MappingProxyType({}))
    spines: Mapping[str, float | None] = field(default_factory=lambda: MappingProxyType({}))

    def leaf_of(self, host: str) -> str | None:
        """The leaf of ``host`` (None: the host has no known location)."""
        location = self.locations.get(host)
        return location.leaf if location else None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form for the API and ``cortex-manage network show``."""
        return {
            "spines": [{"name": s, "uplink_gbps": g} for s, g in sorted(self.spines.items())],
            "leaves": [{"name": leaf.name, "spine": leaf.spine, "hosts": list(leaf.hosts),
                        "adjacent": sorted(leaf.adjacent), "uplink_gbps": leaf.uplink_gbps,
                        "source": leaf.source} for leaf in sorted(self.leaves.values(),
                                                                   key=lambda x: x.name)],
            "hosts": [{"host": loc.host, "spine": loc.spine, "leaf": loc.leaf,
                       "block": loc.block, "source": loc.source}
                      for loc in sorted(self.locations.values(), key=lambda x: x.host)],
        }


_NAME = {"type": "string", "minLength": 1, "maxLength": 255}
_GBPS = {"type": "number", "exclusiveMinimum": 0}
FILE_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["leaves"],
    "properties": {
        "description": {"type": "string"},
        "spines": {"type": "object", "additionalProperties": {
            "type": "object", "additionalProperties": False,
            "properties": {"uplink_gbps": _GBPS}}},
        "leaves": {"type": "object", "minProperties": 1, "additionalProperties": {
            "type": "object", "additionalProperties": False, "required": ["hosts"],
            "properties": {"spine": _NAME, "block": _NAME, "uplink_gbps": _GBPS,
                           "hosts": {"type": "array", "items": _NAME, "uniqueItems": True},
                           "adjacent": {"type": "array", "items": _NAME}}}},
    },
}


def parse_topology(document: Any, where: str = "topology") -> dict[str, Any]:
    """Validate a topology document (the file's YAML) and return it normalised.

    Shape: ``{"spines": {name: {"uplink_gbps"?}}, "leaves": {name: {"spine"?, "block"?,
    "uplink_gbps"?, "hosts": [host], "adjacent"?: [leaf]}}}``. Raises
    NetworkTopologyError when the schema fails, a host is in two leaves, a leaf names an
    unknown adjacent leaf or spine.
    """
    check_document(document, FILE_SCHEMA, where, NetworkTopologyError)
    spines = dict(document.get("spines") or {})
    leaves = document["leaves"]
    seen: dict[str, str] = {}
    for name, leaf in leaves.items():
        for host in leaf["hosts"]:
            if host in seen:
                raise NetworkTopologyError(f"{where}: host {host} is in leaves {seen[host]} "
                                           f"and {name}")
            seen[host] = name
        unknown = [a for a in leaf.get("adjacent", ()) if a not in leaves]
        if unknown:
            raise NetworkTopologyError(f"{where}: leaf {name}: unknown adjacent leaf {unknown[0]}")
        if spines and leaf.get("spine") and leaf["spine"] not in spines:
            raise NetworkTopologyError(f"{where}: leaf {name}: unknown spine {leaf['spine']}")
    return {"spines": spines, "leaves": leaves}


def read_topology_file(path: str | Path) -> dict[str, Any]:
    """:func:`parse_topology` of a YAML (or JSON) file; NetworkTopologyError when unusable."""
    return parse_topology(load_document(path, FILE_SCHEMA, NetworkTopologyError), str(path))


def _float(value: Any) -> float | None:
    """A positive bandwidth from aggregate metadata text (None when absent or not a number)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def build_topology(aggregates_by_host: Mapping[str, Iterable[Any]],
                   document: Mapping[str, Any] | None,
                   keys: MetadataKeys = MetadataKeys(),
                   prometheus: Mapping[str, Any] | None = None) -> NetworkTopology:
    """Resolve every host's location: aggregate metadata, then the file, then Prometheus.

    ``aggregates_by_host``: ``{host: [Aggregate]}`` (objects with ``metadata``);
    ``document``: a :func:`parse_topology` result or None; ``prometheus``: the stored
    Prometheus locations in the same shape (a leaf the file defines may appear in it
    with just its hosts) or None. A host keeps the location of the first source that
    places it. The leaves are those of the file, those only Prometheus names and those
    only aggregates name; see the module docstring for adjacency.
    """
    document = document or {"spines": {}, "leaves": {}}
    prometheus = prometheus or {"spines": {}, "leaves": {}}
    locations: dict[str, NetworkLocation] = {}
    leaf_info: dict[str, dict[str, Any]] = {}
    for host, aggregates in aggregates_by_host.items():
        metadata: dict[str, str] = {}
        for aggregate in aggregates:
            metadata.update({k: str(v) for k, v in aggregate.metadata.items()})
        leaf = metadata.get(keys.leaf)
        if not leaf:
            continue
        locations[host] = NetworkLocation(host, metadata.get(keys.spine) or None, leaf,
                                          metadata.get(keys.block) or None, SOURCE_AGGREGATE)
        info = leaf_info.setdefault(leaf, {"spine": None, "uplink": None,
                                           "source": SOURCE_AGGREGATE})
        info["spine"] = info["spine"] or locations[host].spine
        info["uplink"] = info["uplink"] or _float(metadata.get(keys.uplink_gbps))
    for source, stored in ((SOURCE_FILE, document), (SOURCE_PROMETHEUS, prometheus)):
        for name, leaf in stored["leaves"].items():
            info = leaf_info.setdefault(name, {"spine": None, "uplink": None, "block": None,
                                               "source": source})
            info["spine"] = info["spine"] or leaf.get("spine")
            info["uplink"] = info["uplink"] or leaf.get("uplink_gbps")
            info["block"] = info.get("block") or leaf.get("block")
            if "adjacent" in leaf:
                info["adjacent"] = set(leaf["adjacent"])
            for host in leaf["hosts"]:
                locations.setdefault(host, NetworkLocation(
                    host, leaf.get("spine") or info["spine"], name,
                    leaf.get("block") or info["block"], source))
    spines = dict(document.get("spines", {}))
    for name, value in prometheus.get("spines", {}).items():
        spines.setdefault(name, value)
    return _assemble(locations, leaf_info, {"spines": spines})


def _assemble(locations: dict[str, NetworkLocation], leaf_info: dict[str, dict[str, Any]],
              document: Mapping[str, Any]) -> NetworkTopology:
    """Freeze locations and leaves; make adjacency symmetric, defaulting to the same spine."""
    hosts: dict[str, list[str]] = {}
    for location in locations.values():
        hosts.setdefault(location.leaf, []).append(location.host)
    adjacent: dict[str, set[str]] = {name: set(info.get("adjacent") or ())
                                     for name, info in leaf_info.items()}
    for name, info in leaf_info.items():
        if "adjacent" not in info:  # no word from the file: every leaf of the same spine
            adjacent[name] |= {other for other, o in leaf_info.items() if other != name
                               and info["spine"] and o["spine"] == info["spine"]}
    for name, others in list(adjacent.items()):
        for other in others:
            adjacent[other].add(name)
    leaves = {name: LeafDomain(name, info["spine"], tuple(sorted(hosts.get(name, ()))),
                               frozenset(adjacent[name] - {name}), info["uplink"],
                               info["source"])
              for name, info in leaf_info.items()}
    spines = {name: (value or {}).get("uplink_gbps")
              for name, value in document.get("spines", {}).items()}
    for leaf in leaves.values():
        if leaf.spine:
            spines.setdefault(leaf.spine, None)
    return NetworkTopology(MappingProxyType(locations), MappingProxyType(leaves),
                           MappingProxyType(spines))
