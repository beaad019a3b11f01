"""weigher_gpu_model_reserve: keep a GPU model's hosts for the creates that can only go there.

Rule: Nova's PCIWeigher keeps hosts with PCI devices for the requests that need devices;
this does the same per GPU model. A model is pressed when the recorded creates that name
a model lean on it: its share of their GPUs over its share of the fleet's GPUs
(:func:`cortex.knowledge.model_demand.model_pressure`) is above ``threshold`` (1.5 by
default; 1.0 is named demand spread as the fleet's GPUs are). Every GPU of a pressed
model that a create taking any model gets is then a GPU a bound create will miss once
the fleet fills, while other models' GPUs stay free. The raw weight of a host is
``-(pressure - threshold) / scale`` for the most pressed model among its healthy GPUs
that the request accepts (all of them when it names no model), 0 when that is at most
``threshold``. Requests bound to one model see the same weight on every host of it, so
only the requests with a choice of models are moved, towards the models the named
demand needs least; when only pressed hosts are left they still get them.

Demand is learned: the decision log's last four weeks of GPU creates (whole GPUs;
``KnowledgeView.gpu_model_demand``), once ``min_learned`` GPUs are recorded; until then,
and in clouds where no create names a model or the named demand is spread as the
fleet's GPUs are, every host weighs 0. Hosts without a topology report weigh 0. The
threshold and its effect on Alibaba's ``gpuspec33`` pod list are measured in
docs/scheduler/placement-quality.md. Invert: a negative multiplier.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from cortex.knowledge.gpu_names import gpu_model, names_by_product
from cortex.knowledge.model_demand import model_pressure
from cortex.knowledge.view import HostState, KnowledgeView
from cortex.plugins.base import Weigher
from cortex.plugins.registry import register
from cortex.request import Candidate, NovaRequest


@dataclass(frozen=True)
class GpuModelReserveOptions:
    """``threshold`` >= 0 (pressure), ``scale`` > 0 (pressure), ``min_learned`` >= 0 (GPUs)."""

    threshold: float = 1.5
    scale: float = 0.25
    min_learned: float = 100.0

    def __post_init__(self) -> None:
        """Reject a negative threshold or learning floor and a non-positive scale."""
        if self.threshold < 0 or self.min_learned < 0:
            raise ValueError("threshold and min_learned must be >= 0")
        if self.scale <= 0:
            raise ValueError("scale must be > 0")


@register
class GpuModelReserveWeigher(Weigher[NovaRequest, HostState]):
    """Minus how far the host's most pressed accepted GPU model is above the threshold."""

    name = "weigher_gpu_model_reserve"
    services = ("nova", "kubernetes")
    Options = GpuModelReserveOptions
    pressure: Mapping[str, float] = MappingProxyType({})
    names: Mapping[str, str] = MappingProxyType({})

    def applies(self, request: NovaRequest) -> bool:
        """Only for requests of GPUs (passthrough or vGPU)."""
        return request.gpu_count > 0 or bool(request.vgpu_devices)

    def memo_key(self, request: NovaRequest) -> frozenset[str]:
        """The product ids the request accepts: the weight reads them, the host and the view."""
        return request.gpu_products

    def bind(self, request: NovaRequest, view: KnowledgeView) -> GpuModelReserveWeigher:
        """A weigher holding the view's pressure per model (built once per view)."""
        bound = GpuModelReserveWeigher(self.options)
        bound.pressure = model_pressure(view, self.options.min_learned)
        bound.names = names_by_product(view) if bound.pressure else MappingProxyType({})
        return bound

    def weigh(self, host: HostState, request: NovaRequest, candidate: Candidate) -> float:
        """``-(pressure - threshold) / scale`` of the most pressed accepted model, or 0."""
        if not self.pressure or host.topology is None:
            return 0.0
        products = request.gpu_products
        pressure = self.pressure
        most = 0.0
        for gpu in host.topology.gpus:
            if gpu.healthy and (not products or (gpu.device_id or "").lower() in products):
                most = max(most, pressure.get(gpu_model(gpu, self.names), 0.0))
        excess = most - self.options.threshold
        return -excess / self.options.scale if excess > 0 else 0.0
