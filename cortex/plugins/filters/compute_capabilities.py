"""filter_compute_capabilities: the host meets the flavor's ``capabilities:*`` extra specs.

Nova's ComputeCapabilitiesFilter, decided as Nova 34 decides
(:mod:`cortex.rules.nova_capabilities`): each ``capabilities:<name>[:<key>...]`` extra
spec (and an unscoped key naming a Nova HostState attribute, and ``hw:maxphysaddr_bits``)
is matched with Nova's extra-spec operators against the printed value of the node's
attribute (``hypervisor_type``, ``hypervisor_version``, ``host_ip``,
``cpu_info:arch|vendor|model|features|topology:cores``, ``vcpus_total``,
``free_ram_mb``, ``num_instances``, ...; lists print as Python lists). A missing
attribute fails the node; a host passes when one of its named nodes meets every spec.
Option ``case_insensitive`` (default none): top-level names compared case-insensitively,
e.g. ``[hypervisor_type]`` to let ``qemu`` match libvirt's ``QEMU``, which Nova refuses.
Not run on rebuild. Invert: none; drop the step.
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
from cortex.rules.measures import num_io_ops
from cortex.rules.nova_capabilities import (
    capabilities_unmet,
)
from cortex.rules.nova_capabilities import (
    node_capabilities as nova_values,
)


@dataclass(frozen=True)
class ComputeCapabilitiesOptions:
    """``case_insensitive``: top-level capability names compared case-insensitively."""

    case_insensitive: tuple[str, ...] = ()


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
            reason = capabilities_unmet(
                request.flavor.extra_specs, capabilities,
                case_insensitive=frozenset(self.options.case_insensitive))
            if reason is None:
                return None
        return reason


    def check_all(self, hosts: Sequence[tuple[Candidate, HostState]], request: NovaRequest,
                  view: KnowledgeView | None) -> dict[str, str]:
        """``check`` of every host, each distinct set of the values the specs read judged once.

        ``capabilities_unmet`` reads, of a node's capabilities, only the top-level names its specs
        of this scope (and unscoped keys) start with; nodes equal in those names get the
        same answer, and a fleet has few distinct ones (hypervisor type, version...).
        """
        specs = request.flavor.extra_specs
        names = _names_read(specs)
        folded = frozenset(self.options.case_insensitive)
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
                    verdicts[node_key] = capabilities_unmet(
                        specs, self._capabilities(host, node), case_insensitive=folded)
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
        stats = capabilities.get("stats") or {}
        return tuple(_value_key(keys, host, node.node, n, capabilities.get(n, stats.get(n)))
                     for n in names)


def _names_read(specs) -> tuple[str, ...]:
    """The top-level capability names (attributes or stats) ``capabilities_unmet`` reads."""
    names = []
    for key in specs:
        head, sep, rest = key.partition(":")
        if key == "hw:maxphysaddr_bits":
            names.append("cpu_info")
        elif sep and head == "capabilities":
            names.append(rest.split(":")[0])
        elif not sep:
            names.append(key)
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
    """Nova's HostState values for one node (``nova_capabilities.node_capabilities``)."""
    return nova_values(host, node, num_io_ops(host))
