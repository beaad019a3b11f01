"""filter_isolated_hosts: isolated images run on isolated hosts, and those only run them.

Nova's IsolatedHostsFilter (:mod:`cortex.rules.aggregate_isolation`), with Nova's
``[filter_scheduler]`` options: ``isolated_images`` (image ids) run only on
``isolated_hosts`` (host names); with ``restrict_isolated_hosts_to_isolated_images``
(default true, as in Nova) isolated hosts run only isolated images, and none when no
image is isolated. Both lists empty (the default): every host passes. Runs on rebuild.
Invert: none; drop the step.
"""

from __future__ import annotations

from dataclasses import dataclass

from cortex.knowledge.view import HostState
from cortex.plugins.base import Filter
from cortex.plugins.registry import register
from cortex.request import (
    Candidate,
    NovaRequest,
)
from cortex.rules.aggregate_isolation import isolated_hosts_refusal


@dataclass(frozen=True)
class IsolatedHostsOptions:
    """Nova's ``isolated_hosts``, ``isolated_images`` and their restriction flag."""

    isolated_hosts: tuple[str, ...] = ()
    isolated_images: tuple[str, ...] = ()
    restrict_isolated_hosts_to_isolated_images: bool = True


@register
class IsolatedHostsFilter(Filter[NovaRequest, HostState]):
    """Keep isolated images on isolated hosts (and, restricted, those hosts for them)."""

    name = "filter_isolated_hosts"
    run_on_rebuild = True
    Options = IsolatedHostsOptions

    def memo_key(self, request: NovaRequest) -> str | None:
        """The image id."""
        return request.image_id

    def applies(self, request: NovaRequest) -> bool:
        """Only when hosts are isolated."""
        return bool(self.options.isolated_hosts or self.options.isolated_images)

    def check(self, host: HostState, request: NovaRequest, candidate: Candidate) -> str | None:
        """Reason when the host may not run the request's image."""
        o = self.options
        return isolated_hosts_refusal(host.host, request.image_id, o.isolated_hosts,
                                      o.isolated_images,
                                      o.restrict_isolated_hosts_to_isolated_images)
