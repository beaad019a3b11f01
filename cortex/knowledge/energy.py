"""GPU power and carbon per host and availability zone, from a knowledge view.

Pure functions over an immutable KnowledgeView (``/metrics`` computes them once per
knowledge version). Units: power in watts, carbon intensity in grams of CO2(-equivalent)
per kWh drawn from the grid, emission in grams of CO2 per hour.

A host's GPU power, first that is known:

- ``dcgm``: the Prometheus feature ``gpu.power_watts`` (DCGM exporter's
  ``DCGM_FI_DEV_POWER_USAGE`` summed over the host's GPUs, as cortex-sync keeps it,
  ``etc/cortex/prometheus-queries.yaml``): fresh at every Prometheus sync;
- ``nvml``: the sum of the ``power_watts`` the host's cortex-agent read from NVML
  (``nvmlDeviceGetPowerUsage``) over the GPUs that answered, as of its report the view
  holds (a change of power alone does not move the knowledge version).

Neither source sees a GPU passed through to a guest (bound to ``vfio-pci``, it is
invisible to the host's driver): such a GPU's draw is in no sum.

A zone's carbon intensity, first that is known: ``prometheus``, the mean of the feature
``carbon.intensity_g_per_kwh`` over the zone's hosts that carry it (a grid-intensity
exporter joined to the hosts, see the commented query in prometheus-queries.yaml);
``config``, the zone's value of ``[energy] carbon_intensity``; ``default``,
``[energy] default_carbon_intensity``. Emission is ``watts / 1000 * intensity``: the
rate of the hosts' GPU draw now, like weigher_gpu_energy's grams per hour (which
weighs one more GPU; these count what the zone draws).

One more busy GPU (:func:`added_watts`, what ``weigher_gpu_energy`` weighs and what a
placed GPU create records as ``power_delta_watts``): per requested GPU, the power the
placement adds is what a busy GPU of the host draws above an idle one. From DCGM
(``gpu.power_watts``, summed over the host's GPUs): a GPU model's idle draw is the mean
per GPU on hosts of that model with no GPU in use (``idle_watts`` when the view has
none), and a host's busy GPUs draw ``(power - idle GPUs * idle) / busy GPUs``; a host
with no GPU in use counts its model's mean busy draw over the view
(``default_busy_watts`` when none is known). Idle power is paid whether or not a guest
is placed there, so only the increment counts; a host with no GPU in use is charged
``idle_host_watts`` more per GPU (what it could save kept idle). The per-model draws
(:class:`ModelDraws`) are computed once per knowledge view. :func:`cooling` is the
overhead of a host whose hottest GPU (``gpu.temperature_celsius``) runs warm.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cortex.conf import Config, zone_values
from cortex.knowledge.kpis import host_gpus, zone_of
from cortex.knowledge.view import HostState, KnowledgeView

#: The Prometheus feature of a host's GPU power (DCGM), watts summed over its GPUs.
POWER_FEATURE = "gpu.power_watts"
#: The Prometheus feature of the grid's carbon intensity where a host is, gCO2/kWh.
INTENSITY_FEATURE = "carbon.intensity_g_per_kwh"
#: Power sources, preferred first.
POWER_SOURCES = ("dcgm", "nvml")
#: Carbon intensity sources, preferred first.
INTENSITY_SOURCES = ("prometheus", "config", "default")


@dataclass(frozen=True, slots=True)
class ZoneEnergy:
    """One availability zone's GPU power and carbon (zone ``none``: hosts without one).

    ``hosts``: the zone's GPU hosts (a reported GPU, a GPU inventory in Placement or a
    DCGM power reading); ``hosts_with_power``: those whose power is known (by
    :func:`host_power`); ``gpus``: their GPUs (reported by the agent, else Placement's
    passthrough GPU inventory). ``power_watts``: the sum over the hosts with power known
    (None when none is); ``carbon_intensity`` in gCO2/kWh and where it comes from
    (:data:`INTENSITY_SOURCES`); ``grams_per_hour``: ``power_watts / 1000 *
    carbon_intensity`` (None without power).
    """

    availability_zone: str
    hosts: int
    hosts_with_power: int
    gpus: int
    power_watts: float | None
    carbon_intensity: float
    intensity_source: str
    grams_per_hour: float | None


def host_power(host: HostState) -> tuple[float | None, str | None]:
    """``(watts, source)`` of the host's GPUs: DCGM's feature, else NVML's sum, else both None.

    ``dcgm``: the ``gpu.power_watts`` feature (a negative or NaN reading is ignored);
    ``nvml``: the sum of the reported GPUs' ``power_watts`` where at least one GPU
    answered (see the module docstring for what neither sees).
    """
    watts = host.features.get(POWER_FEATURE)
    if watts is not None and watts >= 0:  # NaN compares False
        return float(watts), "dcgm"
    topology = host.topology
    if topology is not None:
        known = [g.power_watts for g in topology.gpus if g.power_watts is not None]
        if known:
            return float(sum(known)), "nvml"
    return None, None


def host_gpu_count(host: HostState) -> int:
    """GPUs of the host: the agent's reported ones, else Placement's passthrough GPUs."""
    if host.topology is not None and host.topology.gpus:
        return len(host.topology.gpus)
    return sum(inventory.total for _, passthrough, inventory in host_gpus(host) if passthrough)


def is_gpu_host(host: HostState) -> bool:
    """Whether the host has GPUs: reported, inventoried in Placement (GPUs or vGPUs), or metered."""
    return bool((host.topology is not None and host.topology.gpus) or host_gpus(host)
                or host.features.get(POWER_FEATURE) is not None)


def zone_energy(view: KnowledgeView, intensities: Mapping[str, float],
                default_intensity: float) -> list[ZoneEnergy]:
    """ZoneEnergy of every availability zone with a GPU host, by zone name.

    ``intensities``: ``{zone: gCO2/kWh}`` (``[energy] carbon_intensity``; a host
    without a zone is in zone ``none``); ``default_intensity`` (gCO2/kWh) is used where
    neither Prometheus nor ``intensities`` knows the zone. Source rules in the module
    docstring.
    """
    gpu_hosts: dict[str, list[HostState]] = {}
    readings: dict[str, list[float]] = {}
    for host in view.hosts.values():
        zone = zone_of(host)
        intensity = host.features.get(INTENSITY_FEATURE)
        if intensity is not None and intensity >= 0:
            readings.setdefault(zone, []).append(float(intensity))
        if is_gpu_host(host):
            gpu_hosts.setdefault(zone, []).append(host)
    zones = []
    for zone in sorted(gpu_hosts):
        hosts = gpu_hosts[zone]
        powers = [watts for watts, _ in map(host_power, hosts) if watts is not None]
        if zone in readings:
            intensity, source = sum(readings[zone]) / len(readings[zone]), "prometheus"
        elif zone in intensities:
            intensity, source = float(intensities[zone]), "config"
        else:
            intensity, source = float(default_intensity), "default"
        power = float(sum(powers)) if powers else None
        zones.append(ZoneEnergy(
            availability_zone=zone, hosts=len(hosts), hosts_with_power=len(powers),
            gpus=sum(host_gpu_count(h) for h in hosts), power_watts=power,
            carbon_intensity=intensity, intensity_source=source,
            grams_per_hour=None if power is None else power / 1000.0 * intensity))
    return zones


@dataclass(frozen=True)
class EnergySettings:
    """The ``[energy]`` options the energy gauges are computed with.

    ``intensities``: ``{availability zone: gCO2/kWh}`` (``carbon_intensity``);
    ``default_intensity``: gCO2/kWh of the other zones; ``export_hosts``: whether the
    per-host series are exported.
    """

    intensities: Mapping[str, float] = field(default_factory=dict)
    default_intensity: float = 400.0
    export_hosts: bool = True

    @classmethod
    def from_conf(cls, conf: Config) -> EnergySettings:
        """The settings of ``conf``'s ``[energy]`` section (checked when it was loaded)."""
        return cls(zone_values(conf.get("energy", "carbon_intensity")),
                   conf.get("energy", "default_carbon_intensity"),
                   conf.get("energy", "export_hosts"))


#: The Prometheus feature of a host's hottest GPU, degrees Celsius.
TEMPERATURE_FEATURE = "gpu.temperature_celsius"


@dataclass(frozen=True)
class DrawDefaults:
    """Watts per GPU the draw model assumes where the view measures none.

    ``idle_watts``: an idle GPU; ``default_busy_watts``: a busy one; ``idle_host_watts``:
    what a host with no GPU in use is charged more per GPU. ``weigher_gpu_energy``'s
    options carry the same three names and may stand in for these.
    """

    idle_watts: float = 60.0
    default_busy_watts: float = 300.0
    idle_host_watts: float = 0.0


_BUSY: dict[int, tuple] = {}


def busy_gpus(topology) -> int:
    """GPUs a guest uses: passed through, or with vGPUs or MIG instances in use.

    Kept per topology (by identity, the topology held): every view asks for every host;
    :class:`ModelDraws` lets replaced views' topologies go (:func:`_keep_only`).
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


_METERED: dict[int, tuple] = {}


def metered_gpus(host: HostState) -> tuple[str | None, float, int, int] | None:
    """``(GPU model, DCGM watts, GPUs, busy GPUs)`` of a metered GPU host, else None.

    None for a host without a ``gpu.power_watts`` reading or without reported GPUs.
    Kept per host state (by identity, the state held), as :func:`busy_gpus`: every
    view's :class:`ModelDraws` reads every host, and a new view keeps the states of the
    hosts that did not change. :class:`ModelDraws` keeps only its view's states once
    more than twice as many are kept (:func:`_keep_only`).
    """
    entry = _METERED.get(id(host))
    if entry is not None and entry[0] is host:
        return entry[1]
    watts, topology = host.features.get(POWER_FEATURE), host.topology
    found = None
    if watts is not None and topology is not None and topology.gpus:
        found = (_product(topology), watts, len(topology.gpus), busy_gpus(topology))
    if len(_METERED) >= 50000:
        _METERED.clear()
    _METERED[id(host)] = (host, found)
    return found


def _keep_only(cache: dict[int, tuple], held: Iterable[Any]) -> None:
    """Drop ``cache``'s entries for objects other than ``held`` once it has twice as many.

    The caches above are keyed by object identity and hold their object, so without
    this every replaced view's host states and topologies would stay alive.
    """
    held = {id(o) for o in held}
    if len(cache) > 2 * len(held):
        for key in [key for key in list(cache) if key not in held]:
            cache.pop(key, None)


class ModelDraws:
    """Per GPU model (PCI product id): mean idle watts per GPU and mean busy watts per GPU."""

    def __init__(self, view, idle_default: float) -> None:
        idle: dict[str | None, list[float]] = {}
        busy: dict[str | None, list[float]] = {}
        hosts = [found for found in map(metered_gpus, view.hosts.values())
                 if found is not None]
        _keep_only(_METERED, view.hosts.values())
        _keep_only(_BUSY, (h.topology for h in view.hosts.values()))
        for product, watts, gpus, used in hosts:
            if not used:
                idle.setdefault(product, []).append(watts / gpus)
        self.idle = {p: sum(v) / len(v) for p, v in idle.items()}
        for product, watts, gpus, used in hosts:
            if used:
                per_idle = self.idle.get(product, idle_default)
                busy.setdefault(product, []).append((watts - (gpus - used) * per_idle) / used)
        self.busy = {p: sum(v) / len(v) for p, v in busy.items()}


_DRAWS: list = [None, None]  # [view, ModelDraws]: the last view's draws (by identity)


def model_draws(view, idle_default: float) -> ModelDraws:
    """The ModelDraws of ``view``, computed once per view (cached by identity)."""
    cached_view, draws = _DRAWS
    if cached_view is not view or draws is None:
        draws = ModelDraws(view, idle_default)
        _DRAWS[:] = [view, draws]
    return draws


def added_watts(host, draws: ModelDraws | None, defaults: Any = DrawDefaults()) -> float:
    """Watts one more busy GPU adds on ``host`` (the module docstring's model).

    ``draws``: the view's per-model draws (None: none known); ``defaults``: a
    :class:`DrawDefaults` or anything with its three attributes.
    """
    topology, power = host.topology, host.features.get(POWER_FEATURE)
    product = _product(topology)
    idle = draws.idle.get(product, defaults.idle_watts) if draws else defaults.idle_watts
    gpus = len(topology.gpus) if topology is not None else 0
    busy = busy_gpus(topology) if topology is not None else 0
    if busy and power is not None:
        per_busy = (power - (gpus - busy) * idle) / busy
    else:
        per_busy = draws.busy.get(product) if draws else None
        if per_busy is None:
            per_busy, idle = defaults.default_busy_watts, defaults.idle_watts
    added = max(0.0, per_busy - idle)
    if gpus and not busy:
        added += defaults.idle_host_watts
    return added


def cooling(host, per_celsius: float, from_celsius: float) -> float:
    """The cooling overhead of ``host``: a factor of 1 or more.

    ``1 + per_celsius * (T - from_celsius)`` when its hottest GPU's temperature ``T``
    is above ``from_celsius``, else 1.
    """
    temperature = host.features.get(TEMPERATURE_FEATURE)
    factor = 1.0
    if temperature is not None and temperature > from_celsius:
        factor += per_celsius * (temperature - from_celsius)
    return factor
