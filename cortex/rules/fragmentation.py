"""The fragmentation gradient: how much free GPU capacity a placement strands.

Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with
Fragmentation Gradient Descent" (USENIX ATC '23), with Nova's device and NUMA rules. A
host's fragmentation F is the expected free GPU capacity, in GPUs, that cannot serve the
next request, its size drawn from a configured distribution:

* passthrough GPUs (``sizes``, GPUs per request): a free GPU serves k GPUs when it lies
  in a set of k free GPUs pairwise joined at ``min_link`` or better spanning no more
  NUMA nodes than such a guest has cells under Nova's ``legacy`` PCI NUMA policy
  (``numa_span``; :meth:`cortex.rules.gpu_sets.GpuMap.usefulness`);
* time-sliced vGPUs (``vgpu_sizes``): a GPU's free vGPUs serve s vGPUs when there are s
  of them (Placement has one VGPU provider per GPU);
* MIG (``mig_sizes``, compute slices): a GPU's free slices serve s slices when one of
  its free MIG instances has s slices or more, or, with ``mig_repartition``, when none of
  its instances is in use (an operator or MIG manager can re-partition it).

Both at once (``vgpu_share``, the share of requests asking vGPUs): where GPUs are
``shareable`` (passed through or shared by vGPUs, whichever comes first: Weng et al.'s
own setting, which only the simulator builds), F is the expectation over the whole
workload: a fraction of free vGPU room is fragment for a passthrough request, and a
vGPU landing on an idle GPU breaks a whole GPU that passthrough requests could have
used (:meth:`FragmentationModel.combined`). The GPUs are fed per host there.

Feeding: a GPU serves nobody without CPUs and memory next to it (:class:`Feed`): per
NUMA node for a guest with a NUMA topology, per host for the others; capacity beyond
what the free CPUs and memory feed, the last GPUs by PCI address, counts whole as
fragment. The GPUs, vGPU parent or MIG instances and CPUs a request takes are those
nova-compute is predicted to claim (:mod:`cortex.rules.device_choice`).
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cortex.knowledge.topology import HostTopology
from cortex.rules.device_choice import CLAIMS, vgpu_parent, vgpu_slots
from cortex.rules.gpu_locality import is_pinned
from cortex.rules.gpu_sets import GpuMap, gpu_map
from cortex.rules.measures import allocation_ratios

Sizes = tuple[tuple[int, float], ...]
#: ``(F before, F after, GPUs asked)`` of one placement.
Change = tuple[float, float, float]
_SLICES = re.compile(r"^(\d+)g\.")


def parse_sizes(table: Mapping[str, float], name: str) -> Sizes:
    """``{"k": share}`` as ``((k, probability), ...)``; ValueError when malformed."""
    if not all(k.isdigit() and int(k) > 0 for k in table):
        raise ValueError(f"{name}: keys are counts (\"1\", \"2\", ...)")
    if any(v < 0 for v in table.values()) or not any(table.values()):
        raise ValueError(f"{name}: shares must be >= 0 and not all 0")
    total = sum(table.values())
    return tuple(sorted((int(k), v / total) for k, v in table.items() if v))


@dataclass(frozen=True, slots=True)
class Feed:
    """What one GPU (unit of capacity) needs to be usable: CPUs and MiB (0: no limit)."""

    cpus: float
    memory_mb: float

    @property
    def off(self) -> bool:
        """Whether neither CPUs nor memory limit the GPUs."""
        return not self.cpus and not self.memory_mb

    def units(self, cpus: float, memory_mb: float) -> float:
        """GPUs that ``cpus`` free CPUs and ``memory_mb`` free MiB can feed (inf: no limit)."""
        limits = []
        if self.cpus:
            limits.append(max(0.0, cpus) / self.cpus)
        if self.memory_mb:
            limits.append(max(0.0, memory_mb) / self.memory_mb)
        return min(limits) if limits else math.inf


@dataclass(frozen=True, slots=True)
class SharedGpu:
    """A vGPU or MIG GPU: ``free`` of ``total`` units, ``usable`` of them fed, ``largest`` servable.

    Units are vGPUs (time-sliced) or compute slices (MIG). ``usable`` None: all free ones.
    """

    free: float
    total: float
    largest: float
    usable: float | None = None

    def capped(self, usable: float) -> SharedGpu:
        """The same GPU with only ``usable`` of its free units fed."""
        usable = min(self.free, usable)
        return SharedGpu(self.free, self.total, min(self.largest, usable), usable)


@dataclass(frozen=True)
class FragmentationModel:
    """What the fragmentation of a host is measured against.

    ``sizes``/``vgpu_sizes``/``mig_sizes``: request sizes with their probabilities
    (:func:`parse_sizes`); ``min_link``: the weakest pair level a multi-GPU set may have
    (:data:`cortex.rules.gpu_sets.LEVELS`); ``cpus_per_gpu``/``memory_mb_per_gpu``: what
    one GPU needs to be fed (None: the request's own per GPU; 0: no limit); ``pack``:
    Nova's ``packing_host_numa_cells_allocation_strategy``, for the claim prediction;
    ``vgpu_share``: the share of requests asking vGPUs, for hosts whose GPUs are
    ``shareable`` (None: such hosts are measured per kind, as the others).
    """

    sizes: Sizes
    vgpu_sizes: Sizes
    mig_sizes: Sizes
    mig_repartition: bool = True
    min_link: str = "numa_node"
    numa_span: bool = True
    cpus_per_gpu: float | None = 8.0
    memory_mb_per_gpu: float | None = 32768.0
    pack: bool = False
    vgpu_share: float | None = None

    def change(self, host: Any, request: Any, candidate: Any) -> Change | None:
        """``(F before, F after, GPUs asked)`` of placing ``request`` on ``host``.

        None without a topology report, or when no claim can be predicted.
        """
        topology = host.topology
        if topology is None or not topology.gpus:
            return None
        if self.vgpu_share is not None and any(g.shareable for g in topology.gpus):
            return self.combined(host, request, candidate)
        if request.gpu_count:
            return self.passthrough(host, request, candidate)
        return self.shared(host, request, candidate)

    def feed(self, request: Any, asked: float) -> Feed:
        """CPUs and MiB one GPU needs: the options, else the request's own per GPU asked."""
        cpus, memory = self.cpus_per_gpu, self.memory_mb_per_gpu
        flavor = request.flavor
        return Feed(flavor.vcpus / asked if cpus is None else cpus,
                    flavor.memory_mb / asked if memory is None else memory)

    # -- passthrough GPUs -------------------------------------------------------------------

    def passthrough(self, host: Any, request: Any, candidate: Any) -> Change | None:
        """``(F before, F after, GPUs asked)`` for whole GPUs; None when no claim is predicted."""
        topology = host.topology
        ratios = allocation_ratios(host, candidate)
        claim = CLAIMS.get(topology, request, ratios, self.pack)
        if claim is None or not claim.devices:
            return None
        gpus = gpu_map(topology)
        free = gpus.mask(g.pci_address for g in topology.free_gpus)
        after = free & ~gpus.mask(claim.devices)
        feed = self.feed(request, len(claim.devices))
        if feed.off:
            fed_before, fed_after = free, after
        elif request.guest_numa:
            pinned = is_pinned(request)
            fed_before = fed_per_cell(topology, gpus, free, feed, pinned, ratios[0])
            fed_after = fed_per_cell(topology, gpus, after, feed, pinned, ratios[0],
                                     guest_cell_usage(request, claim.cells))
        else:
            cpus, memory = host_room(host, candidate, is_pinned(request))
            fed_before = fed_first(gpus, free, feed.units(cpus, memory))
            fed_after = fed_first(gpus, after, feed.units(cpus - request.flavor.vcpus,
                                                          memory - request.flavor.memory_mb))
        return (self.fragment(gpus, free, fed_before), self.fragment(gpus, after, fed_after),
                float(len(claim.devices)))

    def fragment(self, gpus: GpuMap, free: int, fed: int) -> float:
        """Free GPUs minus the expected number of fed ones serving a request of ``sizes``."""
        return bin(free).count("1") - gpus.usefulness(fed, self.sizes, self.min_link,
                                                      self.numa_span)

    # -- GPUs shared any way -----------------------------------------------------------------

    def combined(self, host: Any, request: Any, candidate: Any) -> Change | None:
        """``(F before, F after, GPUs asked)`` over both kinds, on ``shareable`` GPUs.

        A shareable GPU is passed through (in use, no vGPU), shared (vGPUs on it) or idle
        (neither), whichever kind of request the view shows it to. A passthrough request
        takes the idle GPUs nova-compute is predicted to claim; a vGPU request lands on
        the first GPU with room, idle or shared (:func:`vgpu_parent`). F is
        :meth:`combined_fragment` of the result. None when no claim or parent is found
        or the request asks MIG instances (no shareable board has MIG).
        """
        topology = host.topology
        slots = shareable_slots(host)
        gpus = gpu_map(topology)
        idle = gpus.mask(g.pci_address for g in topology.gpus
                         if g.shareable and not g.in_use and not g.vgpus_in_use)
        rooms = {g.pci_address: slots - g.vgpus_in_use for g in topology.gpus
                 if g.shareable and g.vgpus_in_use}
        idle_after, rooms_after = idle, rooms
        if request.gpu_count:
            claim = CLAIMS.get(topology, request, allocation_ratios(host, candidate), self.pack)
            if claim is None or not claim.devices:
                return None
            idle_after = idle & ~gpus.mask(claim.devices)
            asked = float(len(claim.devices))
        else:
            count = sum(r.count for r in request.vgpu_devices)
            if not slots or not count or any(r.mig_profile for r in request.vgpu_devices):
                return None
            parents = [g.pci_address for g in topology.gpus if open_to_vgpus(g)]
            free = [rooms.get(a, slots) for a in parents]
            index = vgpu_parent(free, count)
            if index is None:
                return None
            parent = parents[index]
            idle_after = idle & ~gpus.mask((parent,))
            rooms_after = {a: free[i] - (count if i == index else 0)
                           for i, a in enumerate(parents) if a in rooms or i == index}
            asked = count / slots
        cpus, memory = host_room(host, candidate, is_pinned(request))
        feed = self.feed(request, asked)
        before = self.combined_fragment(gpus, idle, rooms, slots, feed.units(cpus, memory))
        after = self.combined_fragment(gpus, idle_after, rooms_after, slots, feed.units(
            cpus - request.flavor.vcpus, memory - request.flavor.memory_mb))
        return before, after, asked

    def combined_fragment(self, gpus: GpuMap, idle: int, rooms: Mapping[str, int], slots: int,
                          fed: float) -> float:
        """Free capacity, in GPUs, that the next request cannot use, over both kinds.

        ``idle``: the idle GPUs' mask; ``rooms``: free vGPUs of each shared GPU (of
        ``slots``); ``fed``: the GPUs of capacity the host's free CPUs and memory feed
        (inf: no limit), idle GPUs first by PCI address, then the shared ones. A
        passthrough request of k GPUs (share ``1 - vgpu_share``, sizes ``sizes``) uses
        fed idle GPUs in a good enough set (:meth:`GpuMap.usefulness`); a vGPU request
        of s vGPUs (share ``vgpu_share``, sizes ``vgpu_sizes``) uses a fed GPU with s
        free vGPUs, idle ones included. Everything else free is fragment: Weng et al.'s
        F over the whole workload.
        """
        share = self.vgpu_share or 0.0
        pieces = [SharedGpu(r, slots, r) for r in rooms.values()] if slots else []
        fed_idle = idle if math.isinf(fed) else fed_first(gpus, idle, fed)
        whole = bin(fed_idle).count("1")
        if not math.isinf(fed):
            pieces = fed_shared(pieces, fed - whole)
        free = bin(idle).count("1") + sum(g.free / g.total for g in pieces)
        useful_whole = gpus.usefulness(fed_idle, self.sizes, self.min_link, self.numa_span)
        idle_units = [SharedGpu(slots, slots, slots)] * whole if slots else []
        useful_vgpu = shared_useful([*pieces, *idle_units], self.vgpu_sizes)
        return free - (1.0 - share) * useful_whole - share * useful_vgpu

    # -- vGPUs and MIG ----------------------------------------------------------------------

    def shared(self, host: Any, request: Any, candidate: Any) -> Change | None:
        """``(F before, F after, GPUs asked)`` for time-sliced vGPUs or MIG instances."""
        wanted = request.vgpu_devices
        topology = host.topology
        profile = next((r.mig_profile for r in wanted if r.mig_profile), None)
        count = sum(r.count for r in wanted)
        if profile is None and topology.time_sliced_vgpu:
            change = time_sliced_change(host, count)
            sizes = self.vgpu_sizes
        else:
            change = mig_change(topology, profile, count, self.mig_repartition)
            sizes = self.mig_sizes
        if change is None:
            return None
        before, after, asked = change
        feed = self.feed(request, asked)
        if not feed.off:
            cpus, memory = host_room(host, candidate, is_pinned(request))
            before = fed_shared(before, feed.units(cpus, memory))
            after = fed_shared(after, feed.units(cpus - request.flavor.vcpus,
                                                 memory - request.flavor.memory_mb))
        return shared_fragment(before, sizes), shared_fragment(after, sizes), asked


def time_sliced_change(host: Any, count: int
                       ) -> tuple[list[SharedGpu], list[SharedGpu], float] | None:
    """Time-sliced vGPU GPUs before and after ``count`` vGPUs land, in vGPU units.

    The parent is the first GPU with room (:func:`cortex.rules.device_choice.vgpu_parent`);
    the third value is the GPUs asked (``count / vGPUs per GPU``). None: no room or no slots.
    """
    slots = vgpu_slots(host)
    if not slots or not count:
        return None
    free = [slots - g.vgpus_in_use for g in host.topology.gpus
            if g.virtualization_mode == "host_vgpu" and g.mig_mode != "enabled"]
    parent = vgpu_parent(free, count)
    if parent is None:
        return None
    before = [SharedGpu(f, slots, f) for f in free]
    after = list(before)
    left = free[parent] - count
    after[parent] = SharedGpu(left, slots, left)
    return before, after, count / slots


def open_to_vgpus(gpu: Any) -> bool:
    """Whether a ``shareable`` GPU may take vGPUs: it holds some, or is not passed through."""
    return gpu.shareable and bool(gpu.vgpus_in_use or not gpu.in_use)


def shareable_slots(host: Any) -> int:
    """The vGPUs of one ``shareable`` GPU: the VGPU inventory over the GPUs not passed through.

    A shareable GPU passed through has no vGPU room (Placement's VGPU total leaves it
    out); 0 without such GPUs or inventory.
    """
    open_gpus = sum(1 for g in host.topology.gpus if open_to_vgpus(g))
    total = sum(inv.total for node in host.all_nodes
                for rc, inv in node.inventories.items() if rc == "VGPU")
    return total // open_gpus if open_gpus else 0


def mig_slices(profile: str, memory_slices: int = 0) -> int:
    """Compute slices of a MIG profile name (``3g.40gb`` -> 3); ``memory_slices`` if unnamed."""
    found = _SLICES.match(profile)
    return int(found.group(1)) if found else max(1, memory_slices)


def mig_total(gpu: Any) -> int:
    """A MIG GPU's size in slices: its instances' compute slices or placement span (>= 1)."""
    instances = gpu.mig_instances
    return max(1, sum(mig_slices(i.profile, i.placement_size) for i in instances),
               max((i.placement_start + i.placement_size for i in instances), default=0))


def mig_change(topology: HostTopology, profile: str | None, count: int, repartition: bool
               ) -> tuple[list[SharedGpu], list[SharedGpu], float] | None:
    """MIG GPUs before and after ``count`` instances of ``profile`` (None: any free) are taken.

    Units are compute slices (:func:`mig_slices`); the third value is the GPUs asked
    (slices over the GPU's size). Instances are taken GPU after GPU in PCI address order,
    as Nova takes the first allocation candidate Placement lists (one provider per MIG
    instance type and GPU). None when the host lacks the instances.
    """
    mig_gpus = [g for g in topology.gpus if g.mig_mode == "enabled" and g.mig_instances]
    if not mig_gpus or not count:
        return None
    free = {g.pci_address: {i.id for i in g.mig_instances if not i.in_use} for g in mig_gpus}
    after = {address: set(ids) for address, ids in free.items()}
    taken, asked = 0, 0.0
    for gpu in mig_gpus:
        for instance in gpu.mig_instances:
            if taken < count and instance.id in after[gpu.pci_address] and (
                    profile is None or instance.profile == profile):
                after[gpu.pci_address].discard(instance.id)
                taken += 1
                asked += mig_slices(instance.profile, instance.placement_size) / mig_total(gpu)
    if taken < count:
        return None
    return mig_state(mig_gpus, free, repartition), mig_state(mig_gpus, after, repartition), asked


def mig_state(gpus: Sequence[Any], free_ids: Mapping[str, set[int]], repartition: bool
              ) -> list[SharedGpu]:
    """Each MIG GPU's free slices and the largest request it serves (:class:`SharedGpu`)."""
    states = []
    for gpu in gpus:
        free = [i for i in gpu.mig_instances if i.id in free_ids[gpu.pci_address]]
        slices = [mig_slices(i.profile, i.placement_size) for i in free]
        total = mig_total(gpu)
        whole = repartition and len(free) == len(gpu.mig_instances)
        states.append(SharedGpu(sum(slices), total, total if whole else max(slices, default=0)))
    return states


def fed_shared(gpus: Sequence[SharedGpu], fed: float) -> list[SharedGpu]:
    """``gpus`` with only ``fed`` GPUs of capacity usable, the first GPUs first."""
    result = []
    for gpu in gpus:
        usable = max(0.0, min(gpu.free, math.floor(fed * gpu.total + 1e-9)))
        result.append(gpu.capped(usable))
        fed -= usable / gpu.total
    return result


def shared_fragment(gpus: Sequence[SharedGpu], sizes: Sizes) -> float:
    """Free capacity, in GPUs, that a request drawn from ``sizes`` (in units) cannot use.

    A GPU's fed units serve a request of ``s`` units when ``largest >= s``; all other free
    capacity, unfed units included, is fragment (Weng et al.'s measure for GPU fractions).
    """
    return sum(g.free / g.total for g in gpus) - shared_useful(gpus, sizes)


def shared_useful(gpus: Sequence[SharedGpu], sizes: Sizes) -> float:
    """Expected capacity, in GPUs, a request drawn from ``sizes`` (in units) can use.

    A GPU's fed units serve a request of ``s`` units when ``largest >= s``. The GPUs that
    serve ``s`` are the same for every size between two GPUs' ``largest``, so their sum
    is taken once per such step (in the GPUs' order, the same sum), not once per size.
    """
    shares = [((g.free if g.usable is None else g.usable) / g.total, g.largest) for g in gpus]
    levels = sorted({largest for _, largest in shares})
    served: dict[int, float] = {}

    def serving(size: float) -> float:
        step = bisect.bisect_left(levels, size)
        found = served.get(step)
        if found is None:
            found = served[step] = sum(share for share, largest in shares if largest >= size)
        return found

    return sum(p * serving(s) for s, p in sizes)


def fed_first(gpus: GpuMap, free: int, fed: float) -> int:
    """``free`` keeping only the first ``fed`` GPUs by PCI address (the rest unfed)."""
    keep = max(0, math.floor(fed + 1e-9))
    mask = 0
    for i in gpus.members(free)[:keep]:
        mask |= 1 << i
    return mask


def fed_per_cell(topology: HostTopology, gpus: GpuMap, free: int, feed: Feed, pinned: bool,
                 cpu_ratio: float, used: Mapping[int, tuple[int, int]] | None = None) -> int:
    """``free`` keeping on each NUMA node only the GPUs its free CPUs and memory feed.

    Free CPUs are pinnable ones for pinned guests, shared capacity (``len(cpuset) *
    cpu_ratio - cpu_usage``) otherwise. ``used``: ``{cell: (CPUs, MiB)}`` a guest about
    to land takes. GPUs of an unknown node are kept.
    """
    used = used or {}
    for cell in topology.cells:
        cpus, memory = used.get(cell.id, (0, 0))
        room = cell.avail_pcpus if pinned else len(cell.cpuset) * cpu_ratio - cell.cpu_usage
        keep = math.floor(feed.units(room - cpus, cell.avail_memory - memory) + 1e-9) \
            if not feed.off else len(gpus.addresses)
        local = [i for i in gpus.members(free) if gpus.nodes[i] == cell.id]
        for i in local[max(0, keep):]:
            free &= ~(1 << i)
    return free


def guest_cell_usage(request: Any, cells: Sequence[int] | None) -> dict[int, tuple[int, int]]:
    """``{host cell: (CPUs, MiB)}`` the guest takes on its host cells (none: floating)."""
    usage: dict[int, tuple[int, int]] = {}
    for guest, cell in zip(request.guest_numa, cells or (), strict=False):
        cpus, memory = usage.get(cell, (0, 0))
        usage[cell] = (cpus + len(guest.pcpuset) + len(guest.cpuset), memory + guest.memory)
    return usage


def host_room(host: Any, candidate: Any, pinned: bool) -> tuple[float, float]:
    """``(free CPUs, free MiB)`` of the named node in Placement (PCPU or VCPU, MEMORY_MB)."""
    nodes = host.nodes_named(candidate.nodes) or host.all_nodes
    if not nodes:
        return 0.0, 0.0
    cpu = nodes[0].inventories.get("PCPU" if pinned else "VCPU")
    ram = nodes[0].inventories.get("MEMORY_MB")
    return (cpu.free if cpu is not None else 0.0, ram.free if ram is not None else 0.0)
