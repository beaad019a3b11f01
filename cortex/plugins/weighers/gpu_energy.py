"""weigher_gpu_energy: prefer the host where the request's GPUs emit the least CO2.

Rule: per requested GPU, the power the placement adds is what a busy GPU of the host
draws above an idle one (:func:`cortex.knowledge.energy.added_watts`, the model the
recorded GPU demand's ``power_delta_watts`` uses too, with this step's ``idle_watts``,
``default_busy_watts`` and ``idle_host_watts``: set the last where idle hosts are
powered down). The watts become grams of CO2 per hour with the host's
availability zone's ``carbon_intensity`` (gCO2/kWh; ``default_carbon_intensity``
elsewhere), times ``1 + cooling_per_celsius * (T - cooling_from_celsius)`` for a host
whose hottest GPU (``gpu.temperature_celsius``) runs above ``cooling_from_celsius``
(cooling overhead). The raw weight is ``-g/h / scale``: equal placements prefer the
greener, cooler host. Features from the DCGM exporter as cortex-sync keeps them
(``etc/cortex/prometheus-queries.yaml``); the per-model draws are computed once per
knowledge view. Nova has no energy weigher; its MetricsWeigher could only weigh the raw
power. Invert: a negative multiplier.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cortex.knowledge.energy import ModelDraws, added_watts, cooling, model_draws
from cortex.knowledge.view import HostState, KnowledgeView
from cortex.plugins.base import Weigher
from cortex.plugins.registry import register
from cortex.request import Candidate, NovaRequest


@dataclass(frozen=True)
class GpuEnergyOptions:
    """Carbon intensity per availability zone (gCO2/kWh), GPU watts, cooling, scale (g/h)."""

    carbon_intensity: dict[str, float] = field(default_factory=dict)
    default_carbon_intensity: float = 400.0
    idle_watts: float = 60.0
    default_busy_watts: float = 300.0
    idle_host_watts: float = 0.0
    cooling_per_celsius: float = 0.01
    cooling_from_celsius: float = 40.0
    scale: float = 200.0

    def __post_init__(self) -> None:
        """Intensities and watts >= 0; busy above idle; scale > 0."""
        values = [*self.carbon_intensity.values(), self.default_carbon_intensity,
                  self.idle_watts, self.idle_host_watts, self.cooling_per_celsius]
        if any(v < 0 for v in values):
            raise ValueError("carbon intensities, watts and cooling must be >= 0")
        if self.default_busy_watts <= self.idle_watts:
            raise ValueError("default_busy_watts must exceed idle_watts")
        if self.scale <= 0:
            raise ValueError("scale must be > 0")


@register
class GpuEnergyWeigher(Weigher[NovaRequest, HostState]):
    """Minus the grams of CO2 per hour one more busy GPU would emit on the host, scaled."""

    name = "weigher_gpu_energy"
    services = ("nova", "kubernetes")
    Options = GpuEnergyOptions
    draws: ModelDraws | None = None

    def memo_key(self, request: NovaRequest) -> tuple:
        """``()``: the weight reads the host alone (and the view's per-model draws)."""
        return ()

    def applies(self, request: NovaRequest) -> bool:
        """Only for requests of GPUs (passthrough or vGPU)."""
        return request.gpu_count > 0 or bool(request.vgpu_devices)

    def bind(self, request: NovaRequest, view: KnowledgeView) -> GpuEnergyWeigher:
        """A weigher holding the view's per-model idle and busy draws."""
        bound = GpuEnergyWeigher(self.options)
        bound.draws = model_draws(view.root, self.options.idle_watts)
        return bound

    def weigh(self, host: HostState, request: NovaRequest, candidate: Candidate) -> float:
        """``-(busy - idle [+ idle host]) W * gCO2/kWh * cooling / 1000 / scale``."""
        options = self.options
        watts = self.added_watts(host)
        intensity = options.carbon_intensity.get(host.availability_zone or "",
                                                 options.default_carbon_intensity)
        factor = cooling(host, options.cooling_per_celsius, options.cooling_from_celsius)
        return -watts * intensity * factor / 1000.0 / options.scale

    def added_watts(self, host: HostState) -> float:
        """Watts one more busy GPU adds on ``host`` (:mod:`cortex.knowledge.energy`'s model)."""
        return added_watts(host, self.draws, self.options)
