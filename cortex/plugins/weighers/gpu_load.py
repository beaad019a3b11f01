"""weigher_gpu_load: prefer GPU hosts with idle, cool GPUs and free framebuffer.

Rule: from the DCGM features cortex-sync keeps per host (``etc/cortex/prometheus-queries.yaml``):
utilization ``gpu.utilization`` (ratio, mean over the host's GPUs; ``utilization_feature``
may name its ``.window_mean``), framebuffer use ``gpu.framebuffer_used_bytes /
(used + gpu.framebuffer_free_bytes)`` and the hottest GPU's ``gpu.temperature_celsius``
mapped from ``temperature_bounds`` onto 0..1. The raw weight is minus the weighted mean
of those loads (0 idle and cool, -1 saturated); a feature the host lacks is left out
of the mean, and a host with none weighs 0. Meant for hosts that share GPUs between
guests (vGPU, MIG), where the neighbours' load is felt: by default it runs for
requests with vGPUs only (``requests: gpu`` also for passthrough). Nova's
MetricsWeigher (``weight_setting``) weighs such metrics one by one with fixed ratios;
this one normalises and combines them. Invert: a negative multiplier packs by load.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cortex.knowledge.view import HostState
from cortex.plugins.base import Weigher
from cortex.plugins.registry import register
from cortex.request import Candidate, NovaRequest
from cortex.rules.measures import bounded

REQUEST_KINDS = ("vgpu", "gpu")


@dataclass(frozen=True)
class GpuLoadOptions:
    """Weights of utilization, framebuffer and temperature (>= 0), the bounds in degrees C."""

    utilization_weight: float = 1.0
    framebuffer_weight: float = 1.0
    temperature_weight: float = 0.5
    temperature_bounds: list[float] = field(default_factory=lambda: [60.0, 85.0])
    utilization_feature: str = "gpu.utilization"
    requests: str = "vgpu"

    def __post_init__(self) -> None:
        """Weights >= 0 and not all 0; two ascending bounds; a known request kind."""
        weights = (self.utilization_weight, self.framebuffer_weight, self.temperature_weight)
        if any(w < 0 for w in weights) or not any(weights):
            raise ValueError("weights must be >= 0 and not all 0")
        if len(self.temperature_bounds) != 2 or \
                self.temperature_bounds[0] >= self.temperature_bounds[1]:
            raise ValueError("temperature_bounds: [lower, upper] with lower < upper")
        if self.requests not in REQUEST_KINDS:
            raise ValueError(f"requests must be one of {', '.join(REQUEST_KINDS)}")


@register
class GpuLoadWeigher(Weigher[NovaRequest, HostState]):
    """Minus the weighted GPU load of the host (-1..0)."""

    name = "weigher_gpu_load"
    services = ("nova", "kubernetes")
    host_only = True
    Options = GpuLoadOptions

    def applies(self, request: NovaRequest) -> bool:
        """Requests with vGPUs (``requests: gpu``: with any GPU)."""
        if self.options.requests == "gpu":
            return bool(request.vgpu_devices) or request.gpu_count > 0
        return bool(request.vgpu_devices)

    def weigh(self, host: HostState, request: NovaRequest, candidate: Candidate) -> float:
        """``-sum(weight * load) / sum(weight)`` over the features the host has."""
        features, options = host.features, self.options
        loads = []
        utilization = features.get(options.utilization_feature)
        if utilization is not None:
            loads.append((options.utilization_weight, min(1.0, max(0.0, utilization))))
        used = features.get("gpu.framebuffer_used_bytes")
        free = features.get("gpu.framebuffer_free_bytes")
        if used is not None and free is not None and used + free > 0:
            loads.append((options.framebuffer_weight, used / (used + free)))
        temperature = features.get("gpu.temperature_celsius")
        if temperature is not None:
            lower, upper = options.temperature_bounds
            loads.append((options.temperature_weight, bounded(temperature, lower, upper)))
        total = sum(w for w, _ in loads)
        return -sum(w * x for w, x in loads) / total if total else 0.0
