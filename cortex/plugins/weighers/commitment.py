"""weigher_commitment: send a project's requests to the room committed to it.

Rule: a committed reservation (:mod:`cortex.knowledge.commitments`) keeps room on chosen
hosts for one project; other projects' requests see that room as used (the scheduler
lays it over the view as it does Nova's in-flight claims), the owner's see it free.
This weigher makes the owner use it first: a host with a free hold of an active
commitment of the request's project (``project_id`` of Nova's RequestSpec) weighs 1,
any other 0. Without commitments of the project it does not apply. The reference
implementation's committed-resource reservations do the same for Nova's requests.
Invert (keep the owner's commitments for later): a negative multiplier.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime

from cortex.knowledge.commitments import owner_room
from cortex.knowledge.view import HostState, KnowledgeView
from cortex.plugins.base import Weigher
from cortex.plugins.registry import register
from cortex.request import Candidate, NovaRequest


@dataclasses.dataclass(frozen=True)
class CommitmentOptions:
    """No options."""


@register
class CommitmentWeigher(Weigher[NovaRequest, HostState]):
    """1 on hosts with free room committed to the request's project, else 0."""

    name = "weigher_commitment"
    Options = CommitmentOptions

    def __init__(self, options: CommitmentOptions | None = None,
                 room: dict[str, int] | None = None) -> None:
        super().__init__(options)
        self.room = room or {}

    def applies(self, request: NovaRequest) -> bool:
        """Only for requests that name a project."""
        return bool(request.project_id)

    def bind(self, request: NovaRequest, view: KnowledgeView) -> CommitmentWeigher:
        """A weigher holding the project's free committed room per host, now."""
        root = view.root
        room = owner_room(root.commitments, root.hosts, request.project_id, datetime.now(UTC))
        bound = CommitmentWeigher(self.options, room)
        bound.detail = (f"room committed to project {request.project_id} on "
                        f"{len(room)} host(s)" if room else None)
        return bound

    def weigh(self, host: HostState, request: NovaRequest, candidate: Candidate) -> float:
        """1.0 where the project has free committed room, else 0.0."""
        return 1.0 if self.room.get(host.host) else 0.0

    def weigh_all(self, hosts: Sequence[tuple[Candidate, HostState]], request: NovaRequest,
                  view: KnowledgeView | None) -> list[float]:
        """:meth:`weigh` of every pair; all 0.0 at once where the project holds no room."""
        room = self.room
        if not room:
            return [0.0] * len(hosts)
        return [1.0 if room.get(state.host) else 0.0 for _, state in hosts]
