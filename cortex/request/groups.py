"""Group placement wishes of a Nova request: which calls belong together and how to place them.

Requests belong together when Nova creates several instances at once
(``num_instances > 1``: it calls once per instance, with one request id), when the
instance is in a server group (the group's ``hosts`` grows as members are placed), or
when the scheduler hint ``group_size`` names the size. Scheduler hints (Nova passes
any hint through; values are lists of strings):

- ``placement_strategy``: ``consolidated`` (as close as possible: training),
  ``distributed`` (across leaves: inference) or ``balanced``; absent: the pipeline's;
- ``preferred_domain``: a leaf, spine or block name;
- ``latency_sensitive``: ``true``/``false``; true makes the domain a hard constraint;
- ``network_bandwidth``: the minimum uplink bandwidth of the domain, Gbit/s;
- ``group_size`` and ``group_id``: name the group explicitly;
- ``nvlink_clique``: ``true``/``false``; true places the whole group inside one
  multi-node NVLink domain (:func:`cortex.scheduler.promise.clique_of`) or refuses it.

Bad values raise BadRequest (answered 400).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cortex.request.base import BadRequest

STRATEGIES = ("consolidated", "distributed", "balanced")
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


@dataclass(frozen=True, slots=True)
class NetworkPlacement:
    """What the request asks of the fabric.

    ``group_id`` (None: a lone instance) and ``group_size`` (instances in the group,
    at least 1); ``strategy`` one of :data:`STRATEGIES` or None (the pipeline decides);
    ``min_uplink_gbps`` in Gbit/s or None; ``one_clique``: every member inside one
    NVLink clique.
    """

    group_id: str | None
    group_size: int
    strategy: str | None
    preferred_domain: str | None
    latency_sensitive: bool
    min_uplink_gbps: float | None
    one_clique: bool = False

    @property
    def asks_anything(self) -> bool:
        """Whether the network steps have something to do for this request."""
        return bool(self.group_size > 1 or self.preferred_domain or self.latency_sensitive
                    or self.min_uplink_gbps)


def _first(hints: Mapping[str, tuple[str, ...]], name: str) -> str | None:
    """The first value of a hint, stripped (None when absent or empty)."""
    values = hints.get(name) or ()
    return values[0].strip() or None if values else None


def _size(text: str | None) -> int | None:
    """The ``group_size`` hint as a positive integer."""
    if text is None:
        return None
    if not text.isdigit() or not 1 <= int(text) <= 10000:
        raise BadRequest(f"scheduler hint group_size={text!r}: an integer 1..10000 is needed")
    return int(text)


def _bandwidth(text: str | None) -> float | None:
    """The ``network_bandwidth`` hint in Gbit/s (a positive number)."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise BadRequest(f"scheduler hint network_bandwidth={text!r}: a positive number "
                         "of Gbit/s is needed")
    return value


def network_placement(hints: Mapping[str, tuple[str, ...]], num_instances: int,
                      group: Any, request_id: str | None,
                      global_request_id: str | None) -> NetworkPlacement:
    """The request's NetworkPlacement from its hints, multi-create size and server group.

    The group id is the ``group_id`` hint, else the server group's uuid, else (for a
    multi-create) ``request:<global or own request id>``, which every call of one
    multi-create shares. Raises BadRequest for a bad hint value.
    """
    strategy = _first(hints, "placement_strategy")
    if strategy is not None and strategy not in STRATEGIES:
        raise BadRequest(f"scheduler hint placement_strategy={strategy!r}: one of "
                         f"{', '.join(STRATEGIES)}")
    latency = (_first(hints, "latency_sensitive") or "false").lower()
    if latency not in _TRUE + _FALSE:
        raise BadRequest(f"scheduler hint latency_sensitive={latency!r}: true or false")
    clique = (_first(hints, "nvlink_clique") or "false").lower()
    if clique not in _TRUE + _FALSE:
        raise BadRequest(f"scheduler hint nvlink_clique={clique!r}: true or false")
    members = len(group.members) if group is not None else 0
    size = _size(_first(hints, "group_size")) or max(1, num_instances, members)
    group_id = _first(hints, "group_id") or (group.uuid if group is not None else None)
    if group_id is None and size > 1 and (global_request_id or request_id):
        group_id = f"request:{global_request_id or request_id}"
    return NetworkPlacement(group_id, size, strategy, _first(hints, "preferred_domain"),
                            latency in _TRUE, _bandwidth(_first(hints, "network_bandwidth")),
                            clique in _TRUE)
