"""filter_image_properties: the host runs the image's architecture, hypervisor type and version.

Nova's ImagePropertiesFilter (``nova/scheduler/filters/image_props_filter.py``): when
the image asks for ``hw_architecture`` (legacy ``architecture``), ``img_hv_type``
(legacy ``hypervisor_type``) or ``img_hv_requested_version`` (legacy
``hypervisor_version_requires``, e.g. ``>=8.0, <9``), one node of the host must offer
them. Nova reads the node's ``supported_instances``; Cortex derives them from the
node's ``cpu_arch`` and ``hypervisor_type`` with the ``hypervisor_types`` option
(libvirt's QEMU driver runs ``qemu`` and ``kvm`` guests). Names are canonicalised as
Nova does (lower case, ``amd64`` is ``x86_64``, ``i386`` is ``i686``, ``xapi`` is
``xen``); a node reporting neither fails a request that asks for either, as in Nova.
``hw_vm_mode`` is not checked. Runs on rebuild (a new image must still fit the host).
Invert: none; drop the step to accept any image.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from cortex.knowledge.view import HostState, KnowledgeView
from cortex.plugins.base import Filter
from cortex.plugins.registry import register
from cortex.request import (
    Candidate,
    NovaRequest,
)

_ARCH_ALIASES = {"amd64": "x86_64", "i386": "i686", "i486": "i686", "i586": "i686",
                 "x86_32": "i686"}
_PREDICATE = re.compile(r"^\s*(<=|>=|==|!=|<|>)\s*(\d+(?:\.\d+)*)\s*$")
_COMPARE = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
            ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}


@dataclass(frozen=True)
class ImagePropertiesOptions:
    """``hypervisor_types``: node hypervisor type (any case) -> the image hv types it runs."""

    hypervisor_types: dict[str, list[str]] = field(default_factory=lambda: {
        "qemu": ["qemu", "kvm"], "kvm": ["kvm", "qemu"], "ch": ["ch"],
        "vmware vcenter server": ["vmware"], "ironic": ["baremetal"]})


@register
class ImagePropertiesFilter(Filter[NovaRequest, HostState]):
    """Remove hosts whose nodes cannot run the image's architecture, hv type or version."""

    name = "filter_image_properties"
    run_on_rebuild = True
    Options = ImagePropertiesOptions

    def memo_key(self, request: NovaRequest) -> tuple:
        """The image's architecture, hypervisor type and version predicate."""
        return _wanted(request.image_properties)

    def applies(self, request: NovaRequest) -> bool:
        """Only when the image names an architecture, hypervisor type or version."""
        return any(_wanted(request.image_properties))

    def check(self, host: HostState, request: NovaRequest, candidate: Candidate) -> str | None:
        """Reason of the last named node's refusal, when none fits."""
        arch, hv_type, version = _wanted(request.image_properties)
        reason: str | None = "no node"
        for node in host.nodes_named(candidate.nodes):
            reason = self._refusal(node, arch, hv_type, version)
            if reason is None:
                return None
        return reason

    def check_all(self, hosts: Sequence[tuple[Candidate, HostState]], request: NovaRequest,
                  view: KnowledgeView | None) -> dict[str, str]:
        """``check`` of every host: the image read once, each kind of node judged once.

        A node's verdict depends only on its architecture, hypervisor type and version,
        of which a fleet has few combinations.
        """
        wanted = _wanted(request.image_properties)
        verdicts: dict[tuple, str | None] = {}
        removed = {}
        for candidate, state in hosts:
            reason: str | None = "no node"
            for node in state.nodes_named(candidate.nodes):
                kind = (node.cpu_arch, node.hypervisor_type, node.hypervisor_version)
                if kind not in verdicts:
                    verdicts[kind] = self._refusal(node, *wanted)
                reason = verdicts[kind]
                if reason is None:
                    break
            if reason is not None:
                removed[candidate.host] = reason
        return removed

    def _refusal(self, node, arch, hv_type, version) -> str | None:
        """Why ``node`` cannot run the image, or None."""
        node_arch = canonical_arch(node.cpu_arch)
        if arch and arch != node_arch:
            return f"architecture {node_arch} is not the image's {arch}"
        kind = (node.hypervisor_type or "").lower()
        runs = {canonical_hv_type(t) for t in self.options.hypervisor_types.get(kind, [kind])}
        if hv_type and hv_type not in runs:
            return f"hypervisor {node.hypervisor_type} does not run img_hv_type {hv_type}"
        if version and node.hypervisor_version:
            return _version_refusal(node.hypervisor_version, version)
        return None


def _wanted(props) -> tuple[str | None, str | None, str | None]:
    """``(architecture, hv type, version predicate)`` the image asks for (legacy names too)."""
    return (canonical_arch(props.get("hw_architecture") or props.get("architecture")),
            canonical_hv_type(props.get("img_hv_type") or props.get("hypervisor_type")),
            props.get("img_hv_requested_version") or props.get("hypervisor_version_requires"))


def canonical_arch(name: str | None) -> str | None:
    """Nova's ``Architecture.canonicalize``: lower case and the usual aliases."""
    if not name:
        return None
    name = str(name).lower()
    return _ARCH_ALIASES.get(name, name)


def canonical_hv_type(name: str | None) -> str | None:
    """Nova's ``HVType.canonicalize``: lower case, ``xapi`` is ``xen``."""
    if not name:
        return None
    name = str(name).lower()
    return "xen" if name == "xapi" else name


def _version_refusal(hypervisor_version: int, predicate: str) -> str | None:
    """Check Nova's integer version (major*10^6 + minor*10^3 + micro) against ``>=8.0, <9``."""
    have = (hypervisor_version // 1000000, hypervisor_version // 1000 % 1000,
            hypervisor_version % 1000)
    for part in str(predicate).split(","):
        match = _PREDICATE.match(part)
        if match is None:
            return f"unreadable img_hv_requested_version {predicate!r}"
        want = tuple(int(x) for x in match[2].split("."))
        want += (0,) * (3 - len(want))
        if not _COMPARE[match[1]](have, want):
            shown = ".".join(map(str, have))
            return f"hypervisor version {shown} does not meet {predicate}"
    return None
