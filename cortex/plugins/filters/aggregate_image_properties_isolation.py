"""filter_aggregate_image_properties_isolation: aggregates naming image properties keep others out.

Nova's AggregateImagePropertiesIsolation (:mod:`cortex.rules.aggregate_isolation`): for
each metadata key of the host's aggregates that names an image property the image sets
(``hw_architecture``, ``os_distro``, ``img_hv_type``...), the image's value must be one
of the key's comma-separated values; a host whose aggregates name no such property
takes any image. Options as Nova's ``[filter_scheduler]``: ``namespace``
(``aggregate_image_properties_isolation_namespace``, default none: every key; with a
namespace, only keys ``<namespace><separator>...`` are read, and those name no
property) and ``separator`` (default ``.``). Runs on rebuild (a new image must still
fit the host's aggregates). Invert: none; drop the step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cortex.knowledge.view import HostState, KnowledgeView
from cortex.plugins.base import Filter, host_facts
from cortex.plugins.registry import register
from cortex.request import (
    Candidate,
    NovaRequest,
)
from cortex.rules.aggregate_isolation import host_metadata, image_property_refusal


@dataclass(frozen=True)
class AggregateImagePropertiesIsolationOptions:
    """``namespace``: read only keys ``<namespace><separator>*``; None reads every key."""

    namespace: str | None = None
    separator: str = "."


@register
class AggregateImagePropertiesIsolationFilter(Filter[NovaRequest, HostState]):
    """Remove hosts whose aggregates list other values of a property the image sets."""

    name = "filter_aggregate_image_properties_isolation"
    run_on_rebuild = True
    Options = AggregateImagePropertiesIsolationOptions

    def memo_key(self, request: NovaRequest) -> tuple:
        """The image's properties."""
        return tuple(sorted((k, str(v)) for k, v in request.image_properties.items()))

    def applies(self, request: NovaRequest) -> bool:
        """Only when the image sets a property."""
        return bool(request.image_properties)

    def check(self, host: HostState, request: NovaRequest, candidate: Candidate) -> str | None:
        """Reason when an aggregate of the host lists other values of an image property."""
        return image_property_refusal(host_metadata(host.aggregates), request.image_properties,
                                      self.options.namespace, self.options.separator)

    def check_all(self, hosts: Sequence[tuple[Candidate, HostState]], request: NovaRequest,
                  view: KnowledgeView | None) -> dict[str, str]:
        """``check`` of every host, each host's metadata read once per view."""
        metadata = host_facts(view, (self.name, request.service), hosts,
                              lambda h: host_metadata(h.aggregates))
        image, namespace, separator = (request.image_properties, self.options.namespace,
                                       self.options.separator)
        return {c.host: reason for (c, _), m in zip(hosts, metadata, strict=True)
                if (reason := image_property_refusal(m, image, namespace, separator))}
