"""filter_compute_capabilities: the host meets the flavor's ``capabilities:*`` extra specs.

Nova's ComputeCapabilitiesFilter (``nova/scheduler/filters/compute_capabilities_filter.py``):
each extra spec ``capabilities:<name>[:<sub>...]`` is evaluated with every extra-spec
operator (``=``, ``==``, ``!=``, ``>=``, ``<=``, ``s==`` ... ``<in>``, ``<all-in>``,
``<or>``; :mod:`cortex.rules.extra_specs`) against the node's host-state attribute
of that name (``hypervisor_type``, ``hypervisor_version``, ``cpu_info:arch``,
``cpu_info:features``, ``vcpus_total``, ``free_ram_mb``, ``num_instances``, ...);
unscoped keys only when such an attribute exists, other scopes never. A missing
attribute fails the host. The reference implementation skips the filter when an
operator appears; Cortex evaluates them. One deliberate difference: names in
``fold_case`` (default ``hypervisor_type``) compare case-insensitively, because flavors
spell the canonical ``qemu`` while libvirt reports ``QEMU`` (set ``fold_case: []`` for
Nova's exact match). Not run on rebuild. Invert: none; drop the step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cortex.knowledge.view import HostState, KnowledgeView
from cortex.plugins.base import Filter, host_facts
from cortex.plugins.registry import register
from cortex.request import (
    Candidate,
    NovaRequest,
    hashable,
)
from cortex.rules.extra_specs import unmet
from cortex.rules.measures import num_io_ops


@dataclass(frozen=True)
class ComputeCapabilitiesOptions:
    """``fold_case``: capability names compared case-insensitively."""

    fold_case: tuple[str, ...] = ("hypervisor_type",)


@register
class ComputeCapabilitiesFilter(Filter[NovaRequest, HostState]):
    """Remove hosts none of whose named nodes meets the ``capabilities:*`` extra specs."""

    name = "filter_compute_capabilities"
    Options = ComputeCapabilitiesOptions

    def memo_key(self, request: NovaRequest) -> Any:
        """The flavor's extra specs."""
        return hashable(request.flavor.extra_specs)

    def applies(self, request: NovaRequest) -> bool:
        """Only when the flavor has extra specs."""
        return bool(request.flavor.extra_specs)

    def bind(self, request: NovaRequest, view: KnowledgeView) -> CapabilitiesBound:
        """The filter with the capabilities of ``view``'s nodes, each computed once per version."""
        return CapabilitiesBound(self.options, view.per_host(("capabilities",))
                                 if view is not None else {})

    def check(self, host: HostState, request: NovaRequest, candidate: Candidate) -> str | None:
        """Reason of the last named node's first unmet spec, when no node meets them all."""
        return CapabilitiesBound(self.options, {}).check(host, request, candidate)


class CapabilitiesBound(ComputeCapabilitiesFilter):
    """ComputeCapabilitiesFilter bound to the capabilities table of one knowledge view."""

    def __init__(self, options, table: dict) -> None:
        super().__init__(options)
        self._table = table  # {(host, node): (host state, capabilities)}

    def bind(self, request: NovaRequest, view: KnowledgeView) -> CapabilitiesBound:
        """Already bound."""
        return self

    def check(self, host: HostState, request: NovaRequest, candidate: Candidate) -> str | None:
        """Reason of the last named node's first unmet spec, when no node meets them all."""
        reason: str | None = "no node"
        for node in host.nodes_named(candidate.nodes):
            capabilities = self._capabilities(host, node)
            reason = unmet(request.flavor.extra_specs, capabilities,
                           "capabilities", unscoped="if-present",
                           fold_case=frozenset(self.options.fold_case))
            if reason is None:
                return None
        return reason


    def check_all(self, hosts: Sequence[tuple[Candidate, HostState]], request: NovaRequest,
                  view: KnowledgeView | None) -> dict[str, str]:
        """``check`` of every host, each distinct set of the values the specs read judged once.

        ``unmet`` reads, of a node's capabilities, only the top-level names its specs
        of this scope (and unscoped keys) start with; nodes equal in those names get the
        same answer, and a fleet has few distinct ones (hypervisor type, version...).
        """
        specs = request.flavor.extra_specs
        names = _names_read(specs)
        fold_case = frozenset(self.options.fold_case)
        keys = view.per_host(("capability-value-keys",)) if view else {}
        single = host_facts(view, ("capability-keys", names, request.service), hosts,
                            lambda h: self._node_key(keys, names, h, h.all_nodes[0])
                            if len(h.all_nodes) == 1 else None)
        verdicts: dict[tuple, str | None] = {}
        removed = {}
        for (candidate, host), key in zip(hosts, single, strict=True):
            nodes = host.nodes_named(candidate.nodes) if key is None else host.all_nodes
            reason: str | None = "no node"
            for node in nodes:
                node_key = key or self._node_key(keys, names, host, node)
                if node_key not in verdicts:
                    verdicts[node_key] = unmet(specs, self._capabilities(host, node),
                                               "capabilities", unscoped="if-present",
                                               fold_case=fold_case)
                reason = verdicts[node_key]
                if reason is None:
                    break
            if reason is not None:
                removed[candidate.host] = reason
        return removed

    def _capabilities(self, host, node) -> dict:
        """The node's capabilities, kept in the view's table for this very host state."""
        entry = self._table.get((host.host, node.node))
        if entry is not None and entry[0] is host:
            return entry[1]
        capabilities = node_capabilities(host, node)
        self._table[(host.host, node.node)] = (host, capabilities)
        return capabilities

    def _node_key(self, keys: dict, names: tuple[str, ...], host, node) -> tuple:
        """What ``unmet`` reads of the node: a key per name in ``names``."""
        capabilities = self._capabilities(host, node)
        return tuple(_value_key(keys, host, node.node, n, capabilities.get(n)) for n in names)


def _names_read(specs) -> tuple[str, ...]:
    """The top-level capability names ``unmet(..., "capabilities")`` reads for ``specs``."""
    names = []
    for key in specs:
        head, sep, rest = key.partition(":")
        if sep and head != "capabilities":
            continue
        names.append((rest if sep else key).split(":")[0])
    return tuple(dict.fromkeys(names))


_SCALARS = (str, int, float, bool, type(None))


def _value_key(keys: dict, host, node: str, name: str, value) -> tuple:
    """A hashable stand-in for ``value``: equal keys mean equal values, types included.

    Scalars stand for themselves; a list or dict (``cpu_info``) by its repr, kept per
    host state in ``keys`` (``{(host, node, name): (state, key)}``) as it may be long.
    """
    if type(value) in _SCALARS:
        return (type(value), value)
    entry = keys.get((host.host, node, name))
    if entry is not None and entry[0] is host:
        return entry[1]
    key = (type(value), repr(value))
    keys[(host.host, node, name)] = (host, key)
    return key


def node_capabilities(host, node) -> dict:
    """Nova's HostState attributes for one node, by Nova's names (MiB, GiB, counts)."""
    vcpu, ram, disk = (node.inventories.get(rc) for rc in ("VCPU", "MEMORY_MB", "DISK_GB"))
    capabilities = {
        "host": host.host, "nodename": node.node, "hypervisor_hostname": node.node,
        "hypervisor_type": node.hypervisor_type, "hypervisor_version": node.hypervisor_version,
        "cpu_info": {"arch": node.cpu_arch, "features": sorted(host.cpu_features)},
        "num_instances": len(host.instances), "num_io_ops": num_io_ops(host),
        "failed_builds": host.failed_builds, "availability_zone": host.availability_zone,
    }
    if vcpu is not None:
        capabilities |= {"vcpus_total": vcpu.total, "vcpus_used": vcpu.used,
                         "cpu_allocation_ratio": vcpu.allocation_ratio}
    if ram is not None:
        capabilities |= {"total_usable_ram_mb": ram.total - ram.reserved,
                         "free_ram_mb": ram.total - ram.reserved - ram.used,
                         "ram_allocation_ratio": ram.allocation_ratio}
    if disk is not None:
        capabilities |= {"total_usable_disk_gb": disk.total - disk.reserved,
                         "free_disk_mb": (disk.total - disk.reserved - disk.used) * 1024,
                         "disk_allocation_ratio": disk.allocation_ratio}
    return {k: v for k, v in capabilities.items() if v is not None}
