"""filter_image_properties: the host runs the image's architecture, hypervisor type and VM mode.

Nova's ImagePropertiesFilter, decided as Nova 34 decides
(:mod:`cortex.rules.image_properties`): when the image asks for ``hw_architecture``,
``img_hv_type`` or ``hw_vm_mode`` (legacy ``architecture``, ``hypervisor_type``,
``vm_mode``), one ``(arch, hv_type, vm_mode)`` triple of a named node's
``supported_instances`` must contain them all, and then the node's hypervisor version
must meet ``img_hv_requested_version`` (``>=8.0, <9``) and its ``cpu_info`` maxphysaddr
bits ``hw_maxphysaddr_bits``. An image asking for none of the three passes (the version
alone is not checked). Supported instances are those the hypervisor reports (synced, or
written by cortex-agent), else libvirt's for the node's architecture (x86_64 also runs
i686) and type. Option ``default_architecture`` (Nova's ``[filter_scheduler]
image_properties_default_architecture``, default none): the architecture of an image
that names none. Runs on rebuild (a new image must still fit the host). Invert: none;
drop the step to accept any image.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cortex.knowledge.view import HostState, KnowledgeView
from cortex.plugins.base import Filter
from cortex.plugins.registry import register
from cortex.request import (
    Candidate,
    NovaRequest,
)
from cortex.rules.image_properties import image_refusal, supported_instances, wanted


@dataclass(frozen=True)
class ImagePropertiesOptions:
    """``default_architecture``: the architecture of an image that names none (None: none)."""

    default_architecture: str | None = None


@register
class ImagePropertiesFilter(Filter[NovaRequest, HostState]):
    """Remove hosts whose nodes cannot run the image's architecture, hv type or VM mode."""

    name = "filter_image_properties"
    run_on_rebuild = True
    Options = ImagePropertiesOptions

    def _wanted(self, request: NovaRequest) -> tuple:
        return wanted(request.image_properties, self.options.default_architecture)

    def memo_key(self, request: NovaRequest) -> tuple:
        """What the image asks for."""
        return self._wanted(request)

    def applies(self, request: NovaRequest) -> bool:
        """Only when the image names an architecture, hypervisor type or VM mode."""
        return any(self._wanted(request)[:3])

    def check(self, host: HostState, request: NovaRequest, candidate: Candidate) -> str | None:
        """Reason of the last named node's refusal, when none fits."""
        return self.check_all([(candidate, host)], request, None).get(candidate.host)

    def check_all(self, hosts: Sequence[tuple[Candidate, HostState]], request: NovaRequest,
                  view: KnowledgeView | None) -> dict[str, str]:
        """``check`` of every host: the image read once, each kind of node judged once.

        A node's verdict depends only on its supported instances, hypervisor version and
        maxphysaddr bits, of which a fleet has few combinations.
        """
        image = self._wanted(request)
        verdicts: dict[tuple, str | None] = {}
        removed = {}
        for candidate, state in hosts:
            reason: str | None = "no node"
            for node in state.nodes_named(candidate.nodes):
                facts = (supported_instances(node), node.hypervisor_version,
                         _maxphysaddr_bits(node))
                if facts not in verdicts:
                    verdicts[facts] = image_refusal(image, *facts)
                reason = verdicts[facts]
                if reason is None:
                    break
            if reason is not None:
                removed[candidate.host] = reason
        return removed


def _maxphysaddr_bits(node) -> int | None:
    """``cpu_info.maxphysaddr.bits`` of the node, when reported as a number."""
    found = (node.cpu_info or {}).get("maxphysaddr")
    bits = found.get("bits") if isinstance(found, dict) else None
    return bits if isinstance(bits, int) else None
