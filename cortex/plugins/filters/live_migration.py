"""filter_live_migration: a live migration's target can take the running guest from its source.

For ``_nova_check_type=live_migrate`` with a ``source_host`` hint (SAP's Nova sends
it): the target must have the source's CPU architecture, its hypervisor type (spelled
exactly alike) and a hypervisor version not older than the source's (Nova's conductor,
``LiveMigrationTask._check_compatible_with_source_hypervisor``; a version Cortex does not
know is not compared), and CPU features that include every feature of the source's
(the guest's CPU model was chosen on the source; libvirt refuses a target missing any
flag, Nova checks it with ``check_can_live_migrate_destination`` only after scheduling).
CPU features are the syncers' ``cpu_features``; a host without them falls back to its
``HW_CPU_*`` traits.
The source itself cannot be the target (``exclude_source``). When the source is not
known to Cortex, every host passes. Not run on rebuild. Invert: none; drop the step.
"""

from __future__ import annotations

from dataclasses import dataclass

from cortex.knowledge.view import HostState, KnowledgeView
from cortex.plugins.base import Filter
from cortex.plugins.registry import register
from cortex.request import Candidate, NovaRequest
from cortex.rules.measures import source_host


@dataclass(frozen=True)
class LiveMigrationOptions:
    """What the filter may leave out of its checks.

    ``exclude_source``: remove the source host itself. ``skip_hypervisor_version_check``:
    accept a target whose hypervisor is older than the source's (Nova's
    ``[workarounds] skip_hypervisor_version_check_on_lm``); off by default.
    """

    exclude_source: bool = True
    skip_hypervisor_version_check: bool = False


@register
class LiveMigrationFilter(Filter[NovaRequest, HostState]):
    """Remove targets with another architecture, hypervisor, or fewer CPU features."""

    name = "filter_live_migration"
    Options = LiveMigrationOptions
    source: HostState | None = None

    def applies(self, request: NovaRequest) -> bool:
        """Only for live migrations that name their source host."""
        return request.intent == "live_migrate" and source_host(request) is not None

    def bind(self, request: NovaRequest, view: KnowledgeView) -> LiveMigrationFilter:
        """A copy holding the source's HostState (None when unknown)."""
        bound = LiveMigrationFilter(self.options)
        bound.source = view.hosts.get(source_host(request) or "")
        return bound

    def check(self, host: HostState, request: NovaRequest, candidate: Candidate) -> str | None:
        """Reason of the first incompatibility with the source."""
        source = self.source
        if source is None:
            return None
        if host.host == source.host:
            return "host is the live migration's source" if self.options.exclude_source \
                else None
        mine, theirs = _node_facts(host), _node_facts(source)
        for what, have, want in zip(("architecture", "hypervisor type"), mine, theirs,
                                    strict=True):
            if have != want:
                return (f"{what} {','.join(sorted(have))} differs from the source's "
                        f"{','.join(sorted(want))}")
        if not self.options.skip_hypervisor_version_check:
            have_version, want_version = _version(host), _version(source)
            if have_version is not None and want_version is not None \
                    and want_version > have_version:
                return (f"hypervisor version {have_version} is older than the source's "
                        f"{want_version}")
        missing = cpu_features(source) - cpu_features(host)
        if missing:
            return f"lacks the source's CPU feature(s) {', '.join(sorted(missing)[:3])}"
        return None


def cpu_features(host) -> frozenset[str]:
    """The host's CPU flags, or its ``HW_CPU_*`` traits when the syncers gave none."""
    return host.cpu_features or frozenset(t for t in host.traits if t.startswith("HW_CPU_"))


def _node_facts(host) -> tuple[frozenset, frozenset]:
    """``(architectures lower-cased, hypervisor types as reported)`` of the host's nodes."""
    nodes = host.nodes.values()
    return (frozenset((n.cpu_arch or "").lower() for n in nodes),
            frozenset(n.hypervisor_type or "" for n in nodes))


def _version(host) -> int | None:
    """The lowest hypervisor version of the host's nodes; None when none is known."""
    known = [n.hypervisor_version for n in host.nodes.values()
             if n.hypervisor_version is not None]
    return min(known) if known else None
