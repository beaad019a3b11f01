"""weigher_gpu_energy: prefer the host where the request's GPUs emit the least CO2.

Rule: per requested GPU, the power the placement adds is what a busy GPU of the host
draws above an idle one. From DCGM (``gpu.power_watts``, summed over the host's GPUs):
a GPU model's idle draw is the mean per GPU on hosts of that model with no GPU in use
(``idle_watts`` when the view has none), and a host's busy GPUs draw ``(power - idle
GPUs * idle) / busy GPUs``; a host with no GPU in use counts its model's mean busy draw
over the view (``default_busy_watts`` when none is known). Idle power is paid whether or
not we place there, so only the increment counts; a host with no GPU in use is charged
``idle_host_watts`` more per GPU (what it could save kept idle: set it where idle hosts
are powered down). The watts become grams of CO2 per hour with the host's
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

from cortex.knowledge.view import HostState, KnowledgeView
from cortex.plugins.base import Weigher
from cortex.plugins.registry import register
from cortex.request import (
    Candidate,
    NovaRequest,
)


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


_BUSY: dict[int, tuple] = {}


def busy_gpus(topology) -> int:
    """GPUs a guest uses: passed through, or with vGPUs or MIG instances in use.

    Kept per topology (by identity, the topology held): every view asks for every host.
    """
    entry = _BUSY.get(id(topology))
    if entry is not None and entry[0] is topology:
        return entry[1]
    busy = sum(1 for g in topology.gpus if g.in_use or g.vgpus_in_use
               or any(i.in_use for i in g.mig_instances))
    if len(_BUSY) >= 50000:
        _BUSY.clear()
    _BUSY[id(topology)] = (topology, busy)
    return busy


def _product(topology) -> str | None:
    """The GPU model (PCI product id) of a host's first GPU."""
    return topology.gpus[0].device_id if topology is not None and topology.gpus else None


class ModelDraws:
    """Per GPU model (PCI product id): mean idle watts per GPU and mean busy watts per GPU."""

    def __init__(self, view, idle_default: float) -> None:
        idle: dict[str | None, list[float]] = {}
        busy: dict[str | None, list[float]] = {}
        hosts = [(h, h.features.get("gpu.power_watts")) for h in view.hosts.values()]
        hosts = [(h, w) for h, w in hosts if w is not None and h.topology is not None
                 and h.topology.gpus]
        for host, watts in hosts:
            if not busy_gpus(host.topology):
                idle.setdefault(_product(host.topology), []).append(
                    watts / len(host.topology.gpus))
        self.idle = {p: sum(v) / len(v) for p, v in idle.items()}
        for host, watts in hosts:
            used = busy_gpus(host.topology)
            if used:
                per_idle = self.idle.get(_product(host.topology), idle_default)
                free = len(host.topology.gpus) - used
                busy.setdefault(_product(host.topology), []).append(
                    (watts - free * per_idle) / used)
        self.busy = {p: sum(v) / len(v) for p, v in busy.items()}


_DRAWS: list = [None, None]  # [view, ModelDraws]: the last view's draws (by identity)


def model_draws(view, idle_default: float) -> ModelDraws:
    """The ModelDraws of ``view``, computed once per view (cached by identity)."""
    cached_view, draws = _DRAWS
    if cached_view is not view or draws is None:
        draws = ModelDraws(view, idle_default)
        _DRAWS[:] = [view, draws]
    return draws


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
        temperature = host.features.get("gpu.temperature_celsius")
        cooling = 1.0
        if temperature is not None and temperature > options.cooling_from_celsius:
            cooling += options.cooling_per_celsius * (temperature - options.cooling_from_celsius)
        return -watts * intensity * cooling / 1000.0 / options.scale

    def added_watts(self, host) -> float:
        """Watts one more busy GPU adds on ``host`` (see the module docstring)."""
        options = self.options
        topology, power = host.topology, host.features.get("gpu.power_watts")
        product = _product(topology)
        draws = self.draws
        idle = draws.idle.get(product, options.idle_watts) if draws else options.idle_watts
        gpus = len(topology.gpus) if topology is not None else 0
        busy = busy_gpus(topology) if topology is not None else 0
        if busy and power is not None:
            per_busy = (power - (gpus - busy) * idle) / busy
        else:
            per_busy = draws.busy.get(product) if draws else None
            if per_busy is None:
                per_busy, idle = options.default_busy_watts, options.idle_watts
        added = max(0.0, per_busy - idle)
        if gpus and not busy:
            added += options.idle_host_watts
        return added
