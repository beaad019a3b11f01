"""A host's GPU and NUMA topology, immutable and precomputed once per knowledge version.

Built from an agent report (:func:`topology_from_report`, the shape of ``TopologyReport``
in the OpenAPI document) or from the topology tables, which store exactly that. The
NUMA cell model is Nova's host ``NUMACell`` (``nova/objects/numa.py``): ``pcpuset``
(dedicated, PCPU) and ``cpuset`` (shared, VCPU) CPUs, ``siblings``, ``pinned_cpus``,
``cpu_usage`` (shared vCPUs of NUMA guests), ``memory``/``memory_usage`` in MiB and
``mempages`` per page size in KiB. What plugins need per request is derived here
(free pinnable CPUs, free sibling sets, free devices, the GPU pair matrix) so a
filter costs one lookup per host.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import MappingProxyType
from typing import Any

from cortex.cpuset import parse_cpuset

#: ``in_use_source`` values: who said the GPU is taken.
IN_USE_SOURCES = ("placement", "agent", "fleet")
_PROVIDER_PCI = re.compile(
    r"_(?:pci_)?(?P<domain>[0-9a-f]{4})[:_](?P<bus>[0-9a-f]{2})[:_](?P<slot>[0-9a-f]{2})"
    r"[._](?P<function>[0-7])$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class MemPages:
    """Pages of one size in a cell (Nova's NUMAPagesTopology): ``size_kb``, counts of pages."""

    size_kb: int
    total: int
    used: int = 0
    reserved: int = 0

    @property
    def free(self) -> int:
        """Pages neither used nor reserved: ``total - used - reserved``."""
        return self.total - self.used - self.reserved


@dataclass(frozen=True, slots=True)
class NumaCell:
    """A host NUMA cell (Nova's NUMACell); memory in MiB, CPUs as ids.

    ``siblings`` are the SMT sibling sets of the cell's CPUs as sysfs reports them;
    ``usable_siblings`` keeps only CPUs Nova may use (``pcpuset | cpuset``), as the
    libvirt driver does. The facts that do not depend on the cell's usage
    (``usable_siblings``, ``threads_per_core``) are the same objects on every host of a
    model (:func:`_sibling_facts`); ``free_pcpus`` and ``cores_with_free``, which do, are
    computed when first asked and kept.
    """

    id: int
    socket: int | None
    cpus: frozenset[int]
    pcpuset: frozenset[int]
    cpuset: frozenset[int]
    siblings: tuple[frozenset[int], ...]
    memory: int
    memory_usage: int = 0
    cpu_usage: int = 0
    pinned_cpus: frozenset[int] = frozenset()
    mempages: tuple[MemPages, ...] = ()
    distances: tuple[int, ...] = ()
    usable_siblings: tuple[frozenset[int], ...] = field(init=False, compare=False)
    threads_per_core: int = field(init=False, compare=False)
    avail_pcpus: int = field(init=False, compare=False)
    _lazy: dict[str, Any] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        siblings, threads = _sibling_facts(self.siblings, self.pcpuset | self.cpuset)
        object.__setattr__(self, "usable_siblings", siblings)
        object.__setattr__(self, "threads_per_core", threads)
        object.__setattr__(self, "avail_pcpus",
                           len(self.pcpuset) - len(self.pcpuset & self.pinned_cpus))
        object.__setattr__(self, "_lazy", {})

    @property
    def free_pcpus(self) -> frozenset[int]:
        """Free pinnable CPUs: ``pcpuset - pinned_cpus`` (``avail_pcpus`` of them)."""
        found = self._lazy.get("free")
        if found is None:
            found = self._lazy["free"] = self.pcpuset - self.pinned_cpus
        return found

    @property
    def cores_with_free(self) -> tuple[int, ...]:
        """``[t]``: the cores with at least ``t`` free pinnable CPUs (``t`` up to the threads)."""
        found = self._lazy.get("cores")
        if found is None:
            free = self.free_pcpus
            per_core = [len(s & free) for s in self.usable_siblings]
            found = self._lazy["cores"] = tuple(
                sum(1 for n in per_core if n >= t) for t in range(self.threads_per_core + 1))
        return found

    @property
    def avail_memory(self) -> int:
        """MiB not used by guests: ``memory - memory_usage``."""
        return self.memory - self.memory_usage

    def pages(self, size_kb: int) -> MemPages | None:
        """The cell's pages of ``size_kb`` KiB, or None when it has no such pool."""
        return next((p for p in self.mempages if p.size_kb == size_kb), None)


@dataclass(frozen=True, slots=True)
class MigInstance:
    """A MIG GPU instance: NVML id and profile (``3g.40gb``), memory in MiB, placement slices."""

    id: int
    profile_id: int
    profile: str
    placement_start: int
    placement_size: int
    memory_mb: int
    in_use: bool = False


@dataclass(frozen=True, slots=True)
class Gpu:
    """One NVIDIA GPU of the host, by PCI address (``0000:3b:00.0``).

    ``numa_node`` follows the agent's rules (``numa_source`` says which answered);
    ``pci_numa_node`` is sysfs', the one Nova's PCI tracker uses. ``in_use`` says
    whether a guest holds it, ``in_use_source`` who said so (:data:`IN_USE_SOURCES`).
    ``instance_uuid`` is the Nova instance that holds it passed through, where the agent
    (the QEMU process holding its VFIO group), the fleet file or the simulator knows it;
    no rule reads it (it is not part of the topology's state), the descheduler does.
    ``power_watts`` is the draw NVML reported with the topology (watts; None when not
    known); not part of the topology's state either: read by
    :mod:`cortex.knowledge.energy`. ``shareable``: the GPU may be passed through whole or
    shared by vGPUs, whichever a guest asks first (Weng et al.'s setting, which Nova
    cannot run: it binds each GPU to vfio-pci or an mdev type in nova-compute's
    configuration); only the simulator's ``gpu_sharing: any`` boards set it, never an
    agent report.
    """

    pci_address: str
    vendor_id: str
    device_id: str | None
    index: int | None = None
    uuid: str | None = None
    name: str | None = None
    dev_type: str = "type-PCI"
    driver: str | None = None
    memory_mb: int | None = None
    numa_node: int | None = None
    numa_source: str | None = None
    pci_numa_node: int | None = None
    cpu_affinity: frozenset[int] = frozenset()
    mig_mode: str | None = None
    mig_instances: tuple[MigInstance, ...] = ()
    virtualization_mode: str | None = None
    compute_capability: str | None = None
    healthy: bool = True
    health_reasons: tuple[str, ...] = ()
    in_use: bool = False
    in_use_source: str | None = None
    vgpus_in_use: int = 0
    fabric_clique: int | None = None
    fabric_cluster: str | None = None
    shareable: bool = False
    instance_uuid: str | None = field(default=None, compare=False)
    power_watts: float | None = field(default=None, compare=False)

    @property
    def passthrough(self) -> bool:
        """Whether the whole GPU can be passed through (not split by MIG nor a vGPU host)."""
        return self.mig_mode != "enabled" and self.virtualization_mode not in (
            "host_vgpu", "host_vsga")


@dataclass(frozen=True, slots=True)
class DevicePool:
    """Free passthrough GPUs alike in what a PCI spec can ask (Nova's PCI device pool).

    ``attributes`` are the keys a spec is compared with (``vendor_id``, ``product_id``,
    ``dev_type``, ``numa_node``: the sysfs node Nova sees), strings lower-cased;
    ``healthy`` splits pools so unhealthy GPUs can be left out.
    """

    attributes: Mapping[str, Any]
    numa_node: int | None
    dev_type: str
    healthy: bool
    addresses: tuple[str, ...]


def _pools(gpus: Iterable[Gpu]) -> tuple[DevicePool, ...]:
    """Group GPUs into DevicePools, in the order of their first PCI address."""
    groups: dict[tuple, list[Gpu]] = {}
    for gpu in gpus:
        key = (gpu.vendor_id.lower(), (gpu.device_id or "").lower(), gpu.dev_type,
               gpu.pci_numa_node, gpu.healthy)
        groups.setdefault(key, []).append(gpu)
    return tuple(DevicePool(MappingProxyType({"vendor_id": vendor, "product_id": product,
                                              "dev_type": dev_type.lower(),
                                              "numa_node": node}),
                            node, dev_type, healthy, tuple(g.pci_address for g in members))
                 for (vendor, product, dev_type, node, healthy), members in groups.items())


@dataclass(frozen=True, slots=True)
class GpuLink:
    """What joins two GPUs: active NVLinks (through NVSwitch too), NVLink P2P, PCIe level."""

    a: str
    b: str
    nvlink: int
    p2p_nvlink: str | None
    topology: str | None


@dataclass(frozen=True, slots=True)
class Nic:
    """A PCI network interface and its NUMA node."""

    name: str
    pci_address: str | None
    numa_node: int | None


@dataclass(frozen=True, slots=True)
class HostTopology:
    """Everything the agent told about one host, with per-request facts precomputed.

    ``links`` maps both orders of a GPU address pair to its GpuLink. Derived:
    ``free_gpus`` (passthrough-capable, not in use) and their ``device_pools``,
    ``free_mig`` (free MIG instances per profile), ``time_sliced_vgpu`` (a vGPU host GPU
    without MIG: capacity unknown), ``has_threads`` (Nova's ``NUMATopology.has_threads``),
    ``sockets_known`` (every cell reports a socket), ``nvlink_islands`` (GPUs joined by
    NVLink, largest first). ``cpu_info`` and ``host_ip``: the host facts the agent read
    (the view's nodes take them where the sync has none). ``memo`` holds what the rules
    derive from this topology alone (its GPU pair matrix,
    :func:`cortex.rules.gpu_sets.gpu_map`); a changed topology is a new object with an
    empty one.
    """

    cells: tuple[NumaCell, ...]
    gpus: tuple[Gpu, ...]
    links: Mapping[tuple[str, str], GpuLink]
    nics: tuple[Nic, ...] = ()
    reported_at: datetime | None = None
    driver_version: str | None = None
    nvml_error: str | None = None
    cpu_info: Mapping[str, Any] = field(default_factory=dict)
    host_ip: str | None = None
    free_gpus: tuple[Gpu, ...] = field(init=False, compare=False)
    device_pools: tuple[DevicePool, ...] = field(init=False, compare=False)
    free_mig: Mapping[str, int] = field(init=False, compare=False)
    time_sliced_vgpu: bool = field(init=False, compare=False)
    has_threads: bool = field(init=False, compare=False)
    sockets_known: bool = field(init=False, compare=False)
    nvlink_islands: tuple[frozenset[str], ...] = field(init=False, compare=False)
    memo: dict[str, Any] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        free_mig: dict[str, int] = {}
        for gpu in self.gpus:
            for instance in gpu.mig_instances:
                if not instance.in_use:
                    free_mig[instance.profile] = free_mig.get(instance.profile, 0) + 1
        free_gpus = tuple(g for g in self.gpus if g.passthrough and not g.in_use)
        values = {
            "free_gpus": free_gpus,
            "device_pools": _pools(free_gpus),
            "free_mig": MappingProxyType(free_mig),
            "time_sliced_vgpu": any(g.virtualization_mode == "host_vgpu"
                                    and g.mig_mode != "enabled" for g in self.gpus),
            "has_threads": any(c.threads_per_core > 1 for c in self.cells),
            "sockets_known": all(c.socket is not None for c in self.cells),
            "nvlink_islands": _islands(self.gpus, self.links),
            "memo": {},
        }
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def link(self, a: str, b: str) -> GpuLink | None:
        """The link between GPUs ``a`` and ``b`` (PCI addresses), in either order."""
        return self.links.get((a, b))

    def cell(self, cell_id: int) -> NumaCell | None:
        """The cell with this id, or None."""
        return next((c for c in self.cells if c.id == cell_id), None)


_STATES: dict[tuple, int] = {}
_STATE_LINKS: dict[int, Any] = {}
#: Distinct topology states numbered per process; past this the numbering starts over.
STATE_LIMIT = 100_000


def state_id(topology: HostTopology) -> tuple[int, int]:
    """A number for everything of ``topology`` the placement rules can read; kept in its memo.

    Hosts with equal cells, equal GPUs (all but their uuid and index) and the same link
    map (one object per model, :func:`link_map`) get the same number, whatever their
    names and report times: an answer of a rule over the topology holds for all of them
    (:func:`cortex.plugins.topology_options.shared_answer`). ``(epoch, number)``: the
    numbering starts over, with a new epoch, once :data:`STATE_LIMIT` states were seen.
    """
    found = topology.memo.get("state")
    if found is None:
        links = topology.links
        key = (topology.cells, id(links), tuple(
            (g.pci_address, g.vendor_id, g.device_id, g.name, g.dev_type, g.driver,
             g.memory_mb, g.numa_node, g.numa_source, g.pci_numa_node, g.cpu_affinity,
             g.mig_mode, g.mig_instances, g.virtualization_mode, g.compute_capability,
             g.healthy, g.health_reasons, g.in_use, g.in_use_source, g.vgpus_in_use,
             g.fabric_clique, g.fabric_cluster, g.shareable) for g in topology.gpus))
        number = _STATES.get(key)
        if number is None:
            if len(_STATES) >= STATE_LIMIT:
                _STATES.clear()
                _STATE_LINKS.clear()
                _EPOCH[0] += 1
            number = _STATES[key] = len(_STATES)
            _STATE_LINKS[number] = links  # held: its id stays its own while numbered
        found = topology.memo["state"] = (_EPOCH[0], number)
    return found


_EPOCH = [0]


_SIBLING_FACTS: dict[tuple[tuple[frozenset[int], ...], frozenset[int]],
                     tuple[tuple[frozenset[int], ...], int]] = {}


def _sibling_facts(siblings: tuple[frozenset[int], ...], usable: frozenset[int]
                   ) -> tuple[tuple[frozenset[int], ...], int]:
    """``(usable sibling sets, threads per core)`` of a cell, shared by equal cells.

    Every host of a model has the same sibling sets and CPU sets (the parsed lists are
    shared too, :func:`cortex.cpuset.parse_cpuset`), so the usable sets are computed and
    held once per model, not once per host. The table is cleared past 4,096 entries.
    """
    key = (siblings, usable)
    found = _SIBLING_FACTS.get(key)
    if found is None:
        usable_siblings = tuple(s & usable for s in siblings if s & usable)
        threads = max((len(s) for s in usable_siblings), default=1) or 1
        if len(_SIBLING_FACTS) >= 4096:
            _SIBLING_FACTS.clear()
        found = _SIBLING_FACTS[key] = (usable_siblings, threads)
    return found


_ISLANDS: dict[tuple, tuple[Any, tuple[frozenset[str], ...]]] = {}


def _islands(gpus: Iterable[Gpu], links: Mapping[tuple[str, str], GpuLink]
             ) -> tuple[frozenset[str], ...]:
    """Connected components of the NVLink graph (a GPU without NVLink is its own island).

    The same for every host with these GPU addresses and this (shared, see
    :func:`link_map`) links object: kept per both, the table cleared past 4,096 entries.
    """
    addresses = tuple(g.pci_address for g in gpus)
    key = (id(links), addresses)
    entry = _ISLANDS.get(key)
    if entry is None or entry[0] is not links:
        if len(_ISLANDS) >= 4096:
            _ISLANDS.clear()
        entry = _ISLANDS[key] = (links, _components(addresses, links.values()))
    return entry[1]


def _components(addresses: Iterable[str], links: Iterable[GpuLink]
                ) -> tuple[frozenset[str], ...]:
    """:func:`_islands`, computed."""
    parent = {a: a for a in addresses}

    def root(a: str) -> str:
        while parent[a] != a:
            a = parent[a]
        return a

    for link in links:
        if link.nvlink > 0 and link.a in parent and link.b in parent:
            parent[root(link.a)] = root(link.b)
    groups: dict[str, set[str]] = {}
    for address in parent:
        groups.setdefault(root(address), set()).add(address)
    return tuple(sorted((frozenset(g) for g in groups.values()), key=lambda g: (-len(g),
                                                                               min(g))))


def topology_from_report(report: Mapping[str, Any], reported_at: datetime | None = None,
                         placement_in_use: Mapping[str, bool] | None = None) -> HostTopology:
    """The HostTopology of an agent report (see ``TopologyReport`` in the OpenAPI document).

    ``placement_in_use`` (``{pci address: in use}``, from :func:`placement_gpu_usage`)
    overrides the report's ``in_use`` for the GPUs it names, with source ``placement``.
    Raises KeyError/ValueError for a report that lacks required fields.
    """
    placement_in_use = placement_in_use or {}
    gpus = [replace_in_use(_gpu(raw), placement_in_use) for raw in report.get("gpus", ())]
    return HostTopology(
        cells=tuple(sorted((_cell(c) for c in report.get("numa_cells", ())),
                           key=lambda c: c.id)),
        gpus=tuple(sorted(gpus, key=lambda g: g.pci_address)),
        links=link_map(tuple((raw["a"], raw["b"], int(raw.get("nvlink") or 0),
                            raw.get("p2p_nvlink"), raw.get("topology"))
                           for raw in report.get("gpu_links", ()))),
        nics=tuple(Nic(n["name"], n.get("pci_address"), n.get("numa_node"))
                   for n in report.get("nics", ())),
        reported_at=reported_at,
        driver_version=report.get("driver_version"),
        nvml_error=report.get("nvml_error"),
        cpu_info=dict(report.get("cpu_info") or {}), host_ip=report.get("host_ip"),
    )


_LINKS: dict[tuple, Mapping[tuple[str, str], GpuLink]] = {}
_SIBLINGS: dict[tuple[str, ...], tuple[frozenset[int], ...]] = {}


def replace_in_use(found: Gpu, placement_in_use: Mapping[str, bool]) -> Gpu:
    """``found`` with Placement's word on its use, when ``placement_in_use`` names it."""
    if found.pci_address not in placement_in_use:
        return found
    return replace(found, in_use=placement_in_use[found.pci_address], in_use_source="placement")


def link_map(rows: tuple[tuple[str, str, int, str | None, str | None], ...]
           ) -> Mapping[tuple[str, str], GpuLink]:
    """The pair map of ``rows`` (``a, b, nvlink, p2p_nvlink, topology``), shared by equal ones.

    The hosts of one model report the same links between the same PCI addresses, so
    their maps are one object (the GPU pair matrix built on it is shared too,
    :func:`cortex.rules.gpu_sets.gpu_map`). The table is cleared past 4,096 entries.
    """
    found = _LINKS.get(rows)
    if found is None:
        links: dict[tuple[str, str], GpuLink] = {}
        for a, b, nvlink, p2p, level in rows:
            link = GpuLink(_name(a), _name(b), nvlink, _name(p2p), _name(level))
            links[(link.a, link.b)] = links[(link.b, link.a)] = link
        if len(_LINKS) >= 4096:
            _LINKS.clear()
        found = _LINKS[rows] = MappingProxyType(links)
    return found


def _siblings(texts: Iterable[str]) -> tuple[frozenset[int], ...]:
    """The parsed sibling sets of a cell, the same tuple for every equal list."""
    key = tuple(texts)
    found = _SIBLINGS.get(key)
    if found is None:
        if len(_SIBLINGS) >= 4096:
            _SIBLINGS.clear()
        found = _SIBLINGS[key] = tuple(parse_cpuset(s) for s in key)
    return found


def _name(value: Any) -> Any:
    """``value``, a str interned (PCI addresses, models, levels recur on every host)."""
    return sys.intern(value) if isinstance(value, str) else value


def _cell(raw: Mapping[str, Any]) -> NumaCell:
    """A NumaCell from a report cell."""
    return numa_cell(int(raw["id"]), raw.get("socket"), raw.get("cpus"),
                     raw.get("dedicated_cpus"), raw.get("shared_cpus"),
                     raw.get("siblings", ()), raw["memory_mb"], raw.get("memory_usage_mb"),
                     raw.get("cpu_usage"), raw.get("pinned_cpus"), raw.get("mempages", ()),
                     raw.get("distances", ()))


def numa_cell(cell_id: int, socket: int | None, cpus: str | None, dedicated: str | None,
              shared: str | None, siblings: Iterable[str], memory_mb: int,
              memory_usage_mb: int | None, cpu_usage: int | None, pinned: str | None,
              mempages: Iterable[Mapping[str, Any]], distances: Iterable[int]) -> NumaCell:
    """A NumaCell from a report cell's values (CPU lists in the kernel's text form).

    ``mempages``: ``{size_kb, total, used?, reserved?}`` per page size; the report's and
    the topology tables' shape (:mod:`cortex.knowledge.reports` builds cells from rows
    with it, so both give the same cell).
    """
    return NumaCell(
        id=cell_id, socket=socket, cpus=parse_cpuset(cpus), pcpuset=parse_cpuset(dedicated),
        cpuset=parse_cpuset(shared), siblings=_siblings(siblings), memory=int(memory_mb),
        memory_usage=int(memory_usage_mb or 0), cpu_usage=int(cpu_usage or 0),
        pinned_cpus=parse_cpuset(pinned),
        mempages=tuple(sorted((MemPages(int(p["size_kb"]), int(p["total"]), int(p.get("used", 0)),
                                        int(p.get("reserved", 0)))
                               for p in mempages), key=lambda p: p.size_kb)),
        distances=tuple(int(d) for d in distances),
    )


def _gpu(raw: Mapping[str, Any]) -> Gpu:
    """A Gpu from a report GPU."""
    mig = raw.get("mig") or {}
    health = raw.get("health") or {}
    fabric = raw.get("fabric") or {}
    return gpu(
        raw["pci_address"], raw.get("vendor_id"), raw.get("device_id"), raw.get("index"),
        raw.get("uuid"), raw.get("name"), raw.get("dev_type"), raw.get("driver"),
        raw.get("memory_mb"), raw.get("numa_node"), raw.get("numa_source"),
        raw.get("pci_numa_node"), raw.get("cpu_affinity"), mig.get("mode"),
        tuple(mig_instance(int(i["id"]), int(i["profile_id"]), i["profile"],
                           int(i.get("placement_start", 0)), int(i.get("placement_size", 0)),
                           int(i.get("memory_mb", 0)), bool(i.get("in_use")))
              for i in sorted(mig.get("instances", ()), key=lambda i: i["id"])),
        raw.get("virtualization_mode"), raw.get("compute_capability"),
        health.get("healthy", True), health.get("reasons", ()), raw.get("in_use"),
        raw.get("in_use_source"), raw.get("vgpus_in_use"), fabric.get("clique_id"),
        fabric.get("cluster_uuid"), raw.get("instance_uuid"), raw.get("power_watts"))


def gpu(pci_address: str, vendor_id: str | None, device_id: str | None, index: int | None,
        uuid: str | None, name: str | None, dev_type: str | None, driver: str | None,
        memory_mb: int | None, numa_node: int | None, numa_source: str | None,
        pci_numa_node: int | None, cpu_affinity: str | None, mig_mode: str | None,
        mig_instances: tuple[MigInstance, ...], virtualization_mode: str | None,
        compute_capability: str | None, healthy: bool | None, health_reasons: Iterable[str],
        in_use: bool | None, in_use_source: str | None, vgpus_in_use: int | None,
        fabric_clique: int | None, fabric_cluster: str | None,
        instance_uuid: str | None = None, power_watts: float | None = None) -> Gpu:
    """A Gpu from a report GPU's values, the defaults of an agent report applied.

    Vendor ``10de`` and ``type-PCI`` when not given; health true unless said otherwise;
    the strings that recur on every host (addresses, models, modes) interned. Used for
    reports and for the topology tables' rows alike.
    """
    static = (pci_address, vendor_id, device_id, name, dev_type, driver, memory_mb, numa_node,
              numa_source, pci_numa_node, cpu_affinity, mig_mode, virtualization_mode,
              compute_capability, in_use_source)
    shared = _STATIC.get(static)
    if shared is None:
        if len(_STATIC) >= 65536:
            _STATIC.clear()
        shared = _STATIC[static] = (
            _name(pci_address), _name(vendor_id or "10de"), _name(device_id), _name(name),
            _name(dev_type or "type-PCI"), _name(driver), parse_cpuset(cpu_affinity),
            _name(numa_source), _name(mig_mode), _name(virtualization_mode),
            _name(compute_capability), _name(in_use_source))
    (address, vendor, device, model, kind, driver_name, affinity, source, mode, virtualization,
     capability, used_by) = shared
    return Gpu(
        pci_address=address, vendor_id=vendor, device_id=device, index=index, uuid=uuid,
        name=model, dev_type=kind, driver=driver_name, memory_mb=memory_mb,
        numa_node=numa_node, numa_source=source, pci_numa_node=pci_numa_node,
        cpu_affinity=affinity, mig_mode=mode, mig_instances=mig_instances,
        virtualization_mode=virtualization, compute_capability=capability,
        healthy=True if healthy is None else bool(healthy),
        health_reasons=tuple(health_reasons), in_use=bool(in_use), in_use_source=used_by,
        vgpus_in_use=int(vgpus_in_use or 0), fabric_clique=fabric_clique,
        fabric_cluster=fabric_cluster, instance_uuid=instance_uuid,
        power_watts=None if power_watts is None else float(power_watts),
    )


#: The interned static values of a GPU (all but its index, uuid, usage and health), keyed
#: by what a report said: every host of a model repeats them slot by slot.
_STATIC: dict[tuple, tuple] = {}


_MIG: dict[tuple, MigInstance] = {}


def mig_instance(instance_id: int, profile_id: int, profile: str, placement_start: int,
                 placement_size: int, memory_mb: int, in_use: bool) -> MigInstance:
    """A MigInstance, the same object for equal values (a fleet repeats a few layouts).

    The table is cleared past 4,096 entries.
    """
    key = (instance_id, profile_id, profile, placement_start, placement_size, memory_mb,
           in_use)
    found = _MIG.get(key)
    if found is None:
        if len(_MIG) >= 4096:
            _MIG.clear()
        found = _MIG[key] = MigInstance(instance_id, profile_id, _name(profile),
                                        placement_start, placement_size, memory_mb, in_use)
    return found


def placement_gpu_usage(node: str, providers: Iterable[tuple[str, int]]) -> dict[str, bool]:
    """``{pci address: in use}`` from Placement child providers of compute node ``node``.

    Nova names PCI-in-Placement providers ``<node>_<pci address>`` (``cmp1_0000:3b:00.0``)
    and vGPU parents ``<node>_pci_0000_3b_00_0``; ``providers`` yields ``(name, used)``
    with the provider's total usage. Other providers are ignored.
    """
    found = {}
    for name, used in providers:
        if not name.startswith(f"{node}_"):
            continue
        match = _PROVIDER_PCI.search(name[len(node):])
        if match:
            address = "{domain}:{bus}:{slot}.{function}".format(**match.groupdict()).lower()
            found[address] = found.get(address, False) or used > 0
    return found
