"""filter_aggregate_instance_extra_specs: the host's aggregates carry the flavor's extra specs.

Nova's AggregateInstanceExtraSpecsFilter
(``nova/scheduler/filters/aggregate_instance_extra_specs.py``): each flavor extra spec
``aggregate_instance_extra_specs:<key>`` — and each unscoped key, as Nova does — must be
met by one of the values of ``<key>`` in the metadata of the host's aggregates
(comma-separated values split, all aggregates together), with all extra-spec operators
(:mod:`cortex.rules.extra_specs`). A key no aggregate of the host has fails it. Keys
of other scopes (``hw:``, ``capabilities:``, ``trait:``...) are ignored. Not run on
rebuild. Invert: none; drop the step.
"""

from __future__ import annotations

from typing import Any

from cortex.knowledge.view import HostState
from cortex.plugins.base import Filter
from cortex.plugins.registry import register
from cortex.request import (
    Candidate,
    NovaRequest,
    hashable,
)
from cortex.rules.extra_specs import unmet
from cortex.rules.measures import aggregate_metadata

SCOPE = "aggregate_instance_extra_specs"


@register
class AggregateInstanceExtraSpecsFilter(Filter[NovaRequest, HostState]):
    """Remove hosts whose aggregates' metadata does not meet the flavor's extra specs."""

    name = "filter_aggregate_instance_extra_specs"

    def memo_key(self, request: NovaRequest) -> Any:
        """The flavor's extra specs."""
        return hashable(request.flavor.extra_specs)

    def applies(self, request: NovaRequest) -> bool:
        """Only when the flavor has an extra spec this filter checks."""
        return any(":" not in key or key.startswith(SCOPE + ":")
                   for key in request.flavor.extra_specs)

    def check(self, host: HostState, request: NovaRequest, candidate: Candidate) -> str | None:
        """Reason naming the first unmet spec."""
        metadata = {k: sorted(v) for k, v in aggregate_metadata(host).items()}
        return unmet(request.flavor.extra_specs, metadata, SCOPE, nested=False,
                     any_element=True)
