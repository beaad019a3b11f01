"""filter_backend_state: remove Cinder pools whose back end reports itself down.

Cinder's volume drivers may report ``backend_state`` (``up`` or ``down``) in their
stats, which ``get-pools --detail`` and the service list (API microversion 3.49,
Queens) show; a pool whose storage back end is ``down`` cannot create volumes, even
while its cinder-volume service still heartbeats. Pools that report no state pass.
Invert: none; drop the step.
"""

from __future__ import annotations

from dataclasses import dataclass

from cortex.knowledge.view import StoragePoolState
from cortex.plugins.base import Filter
from cortex.plugins.registry import register
from cortex.request import Candidate, CinderRequest


@dataclass(frozen=True)
class BackendStateOptions:
    """``down_states``: ``backend_state`` values that remove a pool (case-insensitive)."""

    down_states: tuple[str, ...] = ("down",)


@register
class BackendStateFilter(Filter[CinderRequest, StoragePoolState]):
    """Remove pools whose ``backend_state`` is down."""

    name = "filter_backend_state"
    services = ("cinder",)
    Options = BackendStateOptions

    def check(self, pool: StoragePoolState, request: CinderRequest,
              candidate: Candidate) -> str | None:
        """Reason when the back end is down."""
        state = str(pool.capabilities.get("backend_state", "")).lower()
        if state and state in {s.lower() for s in self.options.down_states}:
            return f"backend_state is {state}"
        return None
