"""Which GPUs nova-compute hands a guest on the chosen host: a model of its PCI claim.

Cortex chooses the host; the devices on it are chosen later by nova-compute when it
claims the instance. The model follows Nova step by step (the host cell order of
2023.1, the PCI pools of 34.0; ``tests/differential/test_nova_claims.py`` compares it
with Nova 34's own claim):

1. NUMA cells (guests with a NUMA topology only): ``numa_fit_instance_to_host``
   (``nova/virt/hardware.py``) tries assignments of guest cells to host cells in
   permutation order over the host cells sorted by :func:`nova_cell_order`, and keeps
   the first that fits the CPUs and memory and leaves the PCI requests satisfiable
   under their ``numa_policy`` (:func:`cortex.rules.numa_fit.fit_cells` with the PCI
   check of :mod:`cortex.rules.pci_fit`).
2. Device pools (:func:`cortex.rules.pci_fit.device_pools`): ``PciDeviceStats`` keys a
   pool by ``vendor_id``, ``product_id``, ``dev_type``, ``numa_node`` (sysfs' node) and
   the device's own PCI address, so each GPU is a pool, in the order the tracker first
   saw it.
3. The claim (:func:`cortex.rules.pci_fit.take_devices`, Nova's
   ``PciDeviceStats.consume_requests``, ``nova/pci/stats.py``): per PCI request, the
   pools matching one of its specs (PFs only when asked), narrowed to the guest's host
   cells by the NUMA policy (``_filter_pools_for_numa_cells``); devices are taken pool
   after pool, in that order.

Where the prediction can be wrong:

* The pools' order. nova-compute adds its devices from libvirt's node-device listing at
  first start and from its database after a restart; a freed device goes back to its
  own pool, in place. The knowledge view only says which GPUs are free, so the model
  assumes PCI address order; a caller that knows another order passes it as ``order``.
  Releases before per-device pools (grouped pools, a freed device handed out next)
  claim differently.
* PCI in Placement (``[filter_scheduler] pci_in_placement``, 2023.2+): Placement's
  allocation candidate names the device's provider and nova-compute follows it; the
  model does not see that choice.
* The host cell order is reconstructed from Nova 2023.1 (``[compute]
  packing_host_numa_cells_allocation_strategy``, default spread); older releases try
  host cells by id, which ``pack`` does not reproduce either.
* Health: Nova does not know GPU health and may hand out a GPU the agent reports
  unhealthy; the model pools healthy and unhealthy GPUs together, as Nova does.
* Only whole GPUs (``type-PCI``/``type-PF``) follow the PCI tracker: tags from ``[pci]
  device_spec`` (``physical_network``...), VFs and their parents are not modelled. A
  vGPU's parent GPU (:func:`vgpu_parent`) is the first GPU, in PCI address order, with
  room: Nova claims the first allocation candidate Placement lists for the host, one
  per GPU provider, in provider order; Placement does not promise that order. A MIG
  instance (MIG-backed vGPU: one provider of one VGPU per instance the operator
  created) is taken the same way (:func:`mig_choice`): the first free instance of the
  profile, GPU after GPU in the report's order, instances by id on a GPU, the order
  the fragmentation weigher assumes (:func:`cortex.rules.fragmentation.mig_change`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cortex.knowledge.topology import HostTopology
from cortex.rules.numa_fit import PINNED, fit_cells
from cortex.rules.pci_fit import pci_refusal, take_devices


@dataclass(frozen=True, slots=True)
class Claim:
    """What nova-compute would claim: host cell ids per guest cell, GPU PCI addresses.

    ``cells`` is None for a guest without a NUMA topology (its CPUs float).
    """

    cells: tuple[int, ...] | None
    devices: tuple[str, ...]


def free_devices_per_cell(topology: HostTopology) -> dict[int | None, int]:
    """Free passthrough GPUs per sysfs NUMA node, as Nova counts its pools per cell."""
    counts: dict[int | None, int] = {}
    for gpu in topology.free_gpus:
        counts[gpu.pci_numa_node] = counts.get(gpu.pci_numa_node, 0) + 1
    return counts


def nova_cell_order(topology: HostTopology, guest_numa: Sequence[Any], wants_devices: bool,
                    pack: bool = False) -> tuple[int, ...]:
    """Host cell ids in the order Nova's ``numa_fit_instance_to_host`` tries them.

    Nova 2023.1 sorts (stable sorts, the last one decides first): by free memory, then
    by free pinnable CPUs (pinned guests) and by shared CPU usage (shared guests), the
    freest first unless ``pack`` (``[compute] packing_host_numa_cells_allocation_strategy``);
    last, cells with more free PCI devices first for a guest asking for devices, last
    for one that does not.
    """
    cells = sorted(topology.cells, key=lambda c: c.avail_memory, reverse=not pack)
    policy = guest_numa[0].cpu_policy if guest_numa else None
    if policy in PINNED:
        cells = sorted(cells, key=lambda c: c.avail_pcpus, reverse=not pack)
    if policy in (None, "shared", "mixed"):
        cells = sorted(cells, key=lambda c: c.cpu_usage, reverse=pack)
    devices = free_devices_per_cell(topology)
    cells = sorted(cells, key=lambda c: devices.get(c.id, 0), reverse=wants_devices)
    return tuple(c.id for c in cells)


def predict_claim(topology: HostTopology, request: Any, cpu_ratio: float = 1.0,
                  ram_ratio: float = 1.0, pack: bool = False,
                  order: Mapping[str, int] | None = None) -> Claim | None:
    """The Claim nova-compute would make for a NovaRequest on this host; None if it cannot.

    ``cpu_ratio``/``ram_ratio``: the node's allocation ratios; ``pack``: Nova's
    ``packing_host_numa_cells_allocation_strategy``; ``order``: see :func:`device_pools`.
    """
    wanted = request.pci_devices
    cells = None
    if request.guest_numa:
        cell_order = nova_cell_order(topology, request.guest_numa, bool(wanted), pack)
        cells, _ = fit_cells(topology, request.guest_numa, cpu_ratio, ram_ratio,
                             request.emulator_threads_policy == "isolate",
                             accept=(lambda ids: pci_refusal(topology, wanted, ids))
                             if wanted else None, order=cell_order)
        if cells is None:
            return None
    devices = take_devices(topology, wanted, cells, order)
    return None if devices is None else Claim(cells, devices)


def vgpu_slots(host: Any) -> int:
    """The vGPUs of one time-sliced GPU: the node's VGPU inventory over its vGPU GPUs (0: none).

    Placement has one VGPU provider per GPU; Cortex's node inventory is their sum, so
    the per-GPU capacity is taken as the same for every GPU of the host.
    """
    topology = host.topology
    parents = [g for g in topology.gpus if g.virtualization_mode == "host_vgpu"
               and g.mig_mode != "enabled"] if topology is not None else []
    total = sum(inv.total for node in host.all_nodes
                for rc, inv in node.inventories.items() if rc == "VGPU")
    return total // len(parents) if parents else 0


def vgpu_parent(free: Sequence[int], count: int) -> int | None:
    """Index of the GPU a vGPU request of ``count`` lands on: the first with room (None: none).

    ``free``: free vGPUs per vGPU GPU, in PCI address order.
    """
    return next((i for i, f in enumerate(free) if f >= count), None)


def mig_choice(topology: HostTopology, profile: str | None, count: int,
               taken: Collection[tuple[str, int]] = ()
               ) -> tuple[tuple[str, int], ...] | None:
    """The MIG instances ``count`` vGPUs of ``profile`` land on: ``((PCI address, id), ...)``.

    The first free instances of the profile (None: any profile) in provider order: GPU
    after GPU as the report lists them, instances by id on a GPU (see the module's notes),
    leaving out those already ``taken`` by the request's other groups. None when the
    host has fewer free instances of the profile.
    """
    found: list[tuple[str, int]] = []
    for gpu in topology.gpus:
        if gpu.mig_mode != "enabled":
            continue
        for instance in gpu.mig_instances:
            if len(found) < count and not instance.in_use and (
                    profile is None or instance.profile == profile) and (
                    (gpu.pci_address, instance.id) not in taken):
                found.append((gpu.pci_address, instance.id))
    return tuple(found) if len(found) == count and count else None


def request_shape(request: Any) -> tuple:
    """What of a NovaRequest decides its claim: guest cells, device requests, emulator policy.

    Requests of one flavor have the same shape, so their claims on an unchanged host are
    the same.
    """
    cells = tuple((len(c.pcpuset), len(c.cpuset), c.memory, c.pagesize, c.cpu_policy,
                   c.cpu_thread_policy) for c in request.guest_numa)
    devices = tuple((r.kind, r.count, tuple(tuple(sorted(s.items())) for s in r.specs),
                     r.numa_policy, r.mig_profile) for r in request.device_requests)
    return cells, devices, request.emulator_threads_policy


class ClaimCache:
    """Predicted claims by host topology and request shape, shared by the weighers.

    A claim depends only on the topology (immutable, replaced when the host changes), the
    request's shape (:func:`request_shape`), the allocation ratios and Nova's packing
    option, so it is kept under those, the topology by identity (held, so its id cannot be
    reused): every request of a flavor reuses the claims on the hosts that did not change.
    Bounded; thread-safe enough for the GIL (a race costs a recomputation).
    """

    def __init__(self, limit: int = 50000) -> None:
        self._claims: dict[tuple, tuple[HostTopology, Claim | None]] = {}
        self._shapes: tuple[Any, tuple] = (None, ())
        self._limit = limit

    def get(self, topology: HostTopology, request: Any, ratios: tuple[float, float],
            pack: bool) -> Claim | None:
        """The predicted claim of ``request`` on ``topology`` (see :func:`predict_claim`)."""
        last, shape = self._shapes
        if last is not request:
            shape = request_shape(request)
            self._shapes = (request, shape)
        key = (id(topology), shape, ratios, pack)
        entry = self._claims.get(key)
        if entry is not None and entry[0] is topology:
            return entry[1]
        claim = predict_claim(topology, request, ratios[0], ratios[1], pack)
        if len(self._claims) >= self._limit:
            self._claims.clear()
        self._claims[key] = (topology, claim)
        return claim


CLAIMS = ClaimCache()
