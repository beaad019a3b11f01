"""filter_failover_room: keep room to evacuate a failed host, for evacuations only.

Rule (:mod:`cortex.rules.failover`, :func:`~cortex.rules.failover.kept_hosts`): an N+1
failover policy. Per group of like hosts (``group_by``: ``gpu_model``, the
availability zone and the NVIDIA product of the host's GPUs; or ``availability_zone``),
the ``hosts`` enabled, up hosts with the most free room (free GPUs, then free
memory; ties by name) are kept for Nova evacuations (``evacuate`` intent, believed
only when the body's flags back it: :func:`cortex.request.nova.intent_claims`): every
other request is refused there. With hosts of one size, one host's worth of room
per group is room to evacuate any one host of the group. ``sized_by: instances``
sizes the room from the instances instead: the fewest of the emptiest hosts (at most
``hosts``) on which any one member's GPU instances fit, each whole on one kept host
(first fit, largest first, over free GPUs; which instance holds a GPU is the agent's
report, used GPUs of no known holder count as one instance). Chosen again for every
knowledge version, from the synced view: as hosts fill and empty, the room moves to
the emptiest. ``hosts: 0`` (the shipped pipelines' setting) keeps nothing and the step
does not apply; Nova has no such filter, the reference implementation's failover
reservations keep room the same way. Invert: not applicable (a filter).
"""

from __future__ import annotations

from dataclasses import dataclass

from cortex.knowledge.view import HostState, KnowledgeView
from cortex.plugins.base import Filter
from cortex.plugins.registry import register
from cortex.request import Candidate, NovaRequest
from cortex.rules.failover import GROUPINGS, SIZINGS, kept_hosts


@dataclass(frozen=True)
class FailoverRoomOptions:
    """``hosts`` kept per group (0: none), ``group_by`` gpu_model|availability_zone.

    ``sized_by``: ``hosts`` keeps exactly ``hosts`` hosts per group; ``instances`` keeps
    the fewest (at most ``hosts``) that can take any one member's GPU instances.
    """

    hosts: int = 0
    group_by: str = "gpu_model"
    sized_by: str = "hosts"

    def __post_init__(self) -> None:
        """Refuse a negative count, an unknown grouping or sizing."""
        if self.hosts < 0:
            raise ValueError("hosts must be >= 0")
        if self.group_by not in GROUPINGS:
            raise ValueError(f"group_by must be one of {', '.join(GROUPINGS)}")
        if self.sized_by not in SIZINGS:
            raise ValueError(f"sized_by must be one of {', '.join(SIZINGS)}")


@register
class FailoverRoomFilter(Filter[NovaRequest, HostState]):
    """Refuses the hosts kept for evacuations to every other request."""

    name = "filter_failover_room"
    Options = FailoverRoomOptions

    def __init__(self, options: FailoverRoomOptions | None = None,
                 kept: dict[str, tuple[str, str]] | None = None) -> None:
        super().__init__(options)
        self.kept = kept or {}

    def applies(self, request: NovaRequest) -> bool:
        """When the policy keeps hosts, for every request but an evacuation."""
        return self.options.hosts > 0 and request.intent != "evacuate"

    def bind(self, request: NovaRequest, view: KnowledgeView) -> FailoverRoomFilter:
        """A filter holding the kept hosts of ``view``'s knowledge version."""
        options = self.options
        kept = view.root.derived(
            ("failover-room", options.hosts, options.group_by, options.sized_by),
            lambda root: kept_hosts(root, options.hosts, options.group_by, options.sized_by))
        return FailoverRoomFilter(options, kept)

    def check(self, host: HostState, request: NovaRequest, candidate: Candidate) -> str | None:
        """None unless the host is kept for evacuations."""
        group = self.kept.get(host.host)
        if group is None:
            return None
        zone, models = group
        return (f"kept free for evacuations (failover room of "
                f"{zone or 'no zone'}{', GPUs ' + models if models else ''})")
