"""The simulated cloud: hosts whose CPUs, memory and GPUs are claimed and freed as Nova would.

Each :class:`SimHost` keeps what nova-compute and Placement keep for a compute node:
the Placement usage per resource class, per NUMA cell the pinned CPUs, shared vCPU usage
and memory of NUMA guests, the GPUs handed out and the vGPUs per GPU; nova-compute's PCI
pools keep their first-seen (PCI address) order, a freed GPU returning to its own pool.
A claim (:meth:`SimHost.claim`) follows nova-compute's resource tracker with
:func:`cortex.rules.device_choice.predict_claim` as the PCI and NUMA model, in the
device order the host's tracker has (:data:`DEVICE_ORDERS`: PCI address order, which the
weighers assume, or a seeded shuffle per host, as a tracker that listed its devices
otherwise would have; the claim then records the devices the weighers' model predicted,
so the prediction errors show); it picks pinned CPUs core by core (siblings together, as
Nova's ``prefer`` thread policy does) and vGPUs on the first GPU with room
(``vgpu_parent``). A board with ``gpu_sharing: any`` (Weng et al.'s setting, which
Nova cannot run) lets each GPU be passed through whole or shared by vGPUs, whichever
comes first: a host shows a vGPU request its GPUs that are not passed through as vGPU
parents, and a passthrough request its GPUs that hold no vGPU as free passthrough GPUs
(:data:`KINDS`). A MIG board (``mig``: MIG-backed vGPUs, the GPU instances the operator
created) hands a vGPU request a free GPU instance of the profile its trait names, the
first in provider order (:func:`cortex.rules.device_choice.mig_choice`), and frees it
when the guest leaves; the instances themselves stay, as Nova does not re-partition.
After every change the host answers a new immutable
:class:`~cortex.knowledge.view.HostState`, with its instances (what the synced servers
list would show) and DCGM-like features (``gpu.power_watts``, ``gpu.utilization``,
``gpu.temperature_celsius``, framebuffer bytes) modelled from the board's idle and busy
watts and the GPUs in use.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from cortex.knowledge.gpu_names import ANY_MODEL, NAMES_KEY, gpu_model, names_by_product
from cortex.knowledge.model_demand import SUPPLY_KEY, model_supply
from cortex.knowledge.network import build_topology
from cortex.knowledge.topology import HostTopology, mig_instance, topology_from_report
from cortex.knowledge.view import HostState, InstanceSummary, Inventory, KnowledgeView, NodeState
from cortex.rules.device_choice import mig_choice, predict_claim, vgpu_parent
from cortex.rules.mig_slots import A100_80GB
from cortex.simulator.boards import board_inventories, board_report, mig_trait
from cortex.simulator.fleet import Fleet, HostSpec

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Allocation:
    """What one instance holds on its host (to free it on departure)."""

    resources: dict[str, int]
    pinned: dict[int, frozenset[int]] = field(default_factory=dict)
    memory: dict[int, int] = field(default_factory=dict)
    shared: dict[int, int] = field(default_factory=dict)
    gpus: tuple[str, ...] = ()
    vgpus: dict[str, int] = field(default_factory=dict)
    cells: tuple[int, ...] | None = None
    predicted: tuple[str, ...] = ()
    #: MIG instances held, as ``(GPU PCI address, instance id)``
    mig: tuple[tuple[str, int], ...] = ()


#: The device orders a simulated nova-compute's PCI tracker may have.
DEVICE_ORDERS = ("pci", "shuffled")
#: What a request asks, for a host whose GPUs are shared any way: ``pci`` (passthrough
#: GPUs) or ``vgpu``. Such a host shows each kind its own state.
KINDS = ("pci", "vgpu")


class SimHost:
    """One compute host's state, mutable; :meth:`state` is its immutable view.

    ``device_order``: the order of its tracker's device pools (:data:`DEVICE_ORDERS`);
    ``shuffled`` draws a permutation seeded by ``seed`` and the host's name.
    """

    def __init__(self, spec: HostSpec, pack_numa_cells: bool = False,
                 device_order: str = "pci", seed: int = 0) -> None:
        self.spec = spec
        self.pack = pack_numa_cells
        self.base = topology_from_report(board_report(spec.board))
        self.inventories = {rc: Inventory(total=v["total"], max_unit=v.get("max_unit",
                                                                           v["total"]),
                                          allocation_ratio=v.get("allocation_ratio", 1.0))
                            for rc, v in board_inventories(spec.board).items()}
        self.used = dict.fromkeys(self.inventories, 0)
        self.pinned = {c.id: frozenset() for c in self.base.cells}
        self.cell_memory = dict.fromkeys(self.pinned, 0)
        self.cell_shared = dict.fromkeys(self.pinned, 0)
        self.gpus_in_use: set[str] = set()
        self.vgpus = {g.pci_address: 0 for g in self.base.gpus}
        addresses = [g.pci_address for g in self.base.gpus]
        if device_order == "shuffled":
            random.Random(f"{seed}:{spec.name}").shuffle(addresses)
        elif device_order != "pci":
            raise ValueError(f"device order {device_order!r} is not one of "
                             f"{', '.join(DEVICE_ORDERS)}")
        self.shuffled = device_order == "shuffled"
        self.order = {a: i for i, a in enumerate(addresses)}
        self.allocations: dict[str, Allocation] = {}
        self.flexible = bool(self.vgpu_slots) and spec.board.get("gpu_sharing") == "any"
        #: MIG-backed vGPU host: its instances by ``(address, id)``, as reported (free),
        #: and those a guest holds
        self.mig = any(g.mig_mode == "enabled" for g in self.base.gpus)
        self.mig_instances = {(g.pci_address, i.id): i for g in self.base.gpus
                              for i in g.mig_instances}
        self.mig_held: set[tuple[str, int]] = set()
        #: Placement traits of the host's providers: the MIG profiles' (:func:`mig_trait`)
        self.traits = frozenset(mig_trait(i.profile) for g in self.base.gpus
                                for i in g.mig_instances)
        self._states: dict[str, HostState] = {}
        #: The most free vGPUs one GPU has (-1: no GPU; None: not counted since the last
        #: change).
        self._vgpu_most: int | None = None
        #: Told the host's name after each change (the cloud keeps the hosts changed since
        #: its last view).
        self.on_change: Callable[[str], None] | None = None

    # -- the view
    @property
    def name(self) -> str:
        """The host's name."""
        return self.spec.name

    @property
    def vgpu_slots(self) -> int:
        """The vGPUs of one GPU on a vGPU host, else 0."""
        return int(self.spec.board.get("vgpu_slots") or 0)

    def vgpu_room(self, count: int, profile: str | None = None) -> bool:
        """Whether one VGPU provider has ``count`` free vGPUs (of MIG ``profile``, if named).

        Time-sliced: a provider per GPU, of ``vgpu_slots`` vGPUs; such a host has no MIG
        trait, so a request naming a profile finds no room. MIG: a provider of one vGPU
        per free instance, so a request group of more than one vGPU finds none either
        (Placement takes a group's resources from one provider).
        """
        if self.mig:
            topology = self.state().topology
            return count == 1 and topology is not None and mig_choice(
                topology, profile, 1) is not None
        if profile is not None or not self.vgpu_slots:
            return False
        if self._vgpu_most is None:
            self._vgpu_most = max(self._vgpu_free(), default=-1)
        return self._vgpu_most >= count

    def _vgpu_free(self) -> list[int]:
        """Free vGPUs per GPU in PCI order; 0 for a GPU passed through."""
        return [0 if a in self.gpus_in_use else self.vgpu_slots - used
                for a, used in self.vgpus.items()]

    def passthrough_gpus(self) -> int:
        """GPUs that may be passed through (0 on a vGPU or MIG host)."""
        if self.mig:
            return 0
        return 0 if self.vgpu_slots and not self.flexible else len(self.base.gpus)

    def free_gpus(self) -> int:
        """Free passthrough GPUs (on a shared-any host: neither passed through nor shared)."""
        if self.mig or (self.vgpu_slots and not self.flexible):
            return 0
        return sum(1 for a, used in self.vgpus.items()
                   if a not in self.gpus_in_use and not used)

    def unallocated_gpus(self) -> float:
        """Weng et al.'s unallocated GPUs of the host, in GPUs.

        Its free passthrough GPUs; on a host whose GPUs are shared any way also the free
        share of each GPU that vGPUs share; 0 on a vGPU host; on a MIG host each GPU's
        compute slices not held by a guest's instance, over the GPU's 7 (free instances
        and slices the operator's layout leaves out alike: neither serves a guest).
        """
        if self.mig:
            return len(self.base.gpus) - self.mig_gpus_in_use()
        if not self.flexible:
            return float(self.free_gpus())
        return sum(1.0 if not used else (self.vgpu_slots - used) / self.vgpu_slots
                   for a, used in self.vgpus.items() if a not in self.gpus_in_use)

    def mig_gpus_in_use(self) -> float:
        """GPUs the guests' MIG instances hold, in compute slices over the GPU's (7)."""
        return sum(slices for _, slices in self._mig_held()) / A100_80GB.compute_slices

    def _mig_held(self) -> Iterator[tuple[str, int]]:
        """``(GPU PCI address, compute slices)`` of each MIG instance a guest holds."""
        for address, index in self.mig_held:
            yield address, A100_80GB.profile(
                self.mig_instances[address, index].profile).compute_slices

    def state(self, kind: str = "pci") -> HostState:
        """The HostState of the host now (rebuilt only after a change).

        ``kind`` (:data:`KINDS`) matters only on a host whose GPUs are shared any way;
        ValueError for another.
        """
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
        kind = kind if self.flexible else "pci"
        found = self._states.get(kind)
        if found is None:
            found = self._states[kind] = self._build_state(kind)
        return found

    def _build_state(self, kind: str = "pci") -> HostState:
        """Inventories with usage, the topology with usage, DCGM-like features."""
        inventories = MappingProxyType({rc: replace(inv, used=self.used[rc])
                                        for rc, inv in self.inventories.items()})
        if self.flexible and "VGPU" in inventories:  # a GPU passed through has no vGPU room
            vgpu = inventories["VGPU"]
            inventories = MappingProxyType(dict(inventories) | {"VGPU": replace(
                vgpu, total=self.vgpu_slots * (len(self.base.gpus) - len(self.gpus_in_use)))})
        node = NodeState(self.name, f"uuid-{self.name}", "QEMU", 8002000, "x86_64",
                         self.traits, inventories)
        return HostState(self.name, self.spec.availability_zone, True, True, None, (),
                         MappingProxyType({self.name: node}), self.traits,
                         features=MappingProxyType(self._features()),
                         instances=tuple(InstanceSummary(uuid) for uuid in self.allocations),
                         topology=self.topology(kind))

    def topology(self, kind: str = "pci") -> HostTopology:
        """The board's topology with the host's usage, as a ``kind`` request sees it.

        On a host whose GPUs are shared any way a vGPU request sees every GPU not passed
        through as a vGPU parent, a passthrough request every GPU that holds a vGPU as in
        use; both see every GPU marked ``shareable``, so the fragmentation weigher can
        measure both kinds at once.
        """
        cells = tuple(replace(c, pinned_cpus=self.pinned[c.id],
                              memory_usage=self.cell_memory[c.id],
                              cpu_usage=self.cell_shared[c.id]) for c in self.base.cells)
        holders = {gpu: uuid for uuid, a in self.allocations.items() for gpu in a.gpus}
        gpus = []
        for g in self.base.gpus:
            passed, vgpus = g.pci_address in self.gpus_in_use, self.vgpus[g.pci_address]
            shown = replace(g, in_use=passed, in_use_source="placement", vgpus_in_use=vgpus,
                            instance_uuid=holders.get(g.pci_address), shareable=self.flexible)
            if self.flexible and kind == "vgpu" and not passed:
                shown = replace(shown, virtualization_mode="host_vgpu")
            elif self.flexible and kind == "pci" and vgpus:
                shown = replace(shown, in_use=True)
            if g.mig_instances and self.mig_held:
                shown = replace(shown, mig_instances=tuple(
                    mig_instance(i.id, i.profile_id, i.profile, i.placement_start,
                                 i.placement_size, i.memory_mb,
                                 (g.pci_address, i.id) in self.mig_held)
                    for i in g.mig_instances))
            gpus.append(shown)
        return HostTopology(cells=cells, gpus=tuple(gpus), links=self.base.links)

    def _features(self) -> dict[str, float]:
        """Power, utilization, temperature and framebuffer from the GPUs in use."""
        count = len(self.base.gpus)
        if not count:
            return {}
        model = self.spec.board["gpu"]
        idle, busy = model.get("idle_watts", 50.0), model.get("busy_watts", 300.0)
        slots = self.vgpu_slots
        loads = [1.0 if a in self.gpus_in_use else min(1.0, used / slots) if slots else 0.0
                 for a, used in self.vgpus.items()]
        if self.mig:
            held: dict[str, float] = {}
            for address, slices in self._mig_held():
                held[address] = held.get(address, 0.0) + slices / A100_80GB.compute_slices
            loads = [held.get(a, 0.0) for a in self.vgpus]
        utilization = sum(loads) / count
        memory = float(model.get("memory_mb", 16384)) * 1048576
        return {"gpu.power_watts": sum(idle + (busy - idle) * u for u in loads),
                "gpu.utilization": utilization,
                "gpu.temperature_celsius": 35.0 + 45.0 * max(loads),
                "gpu.framebuffer_used_bytes": memory * sum(loads),
                "gpu.framebuffer_free_bytes": memory * (count - sum(loads))}

    # -- claims
    def claim(self, uuid: str, request: Any) -> Allocation | None:
        """Claim ``request`` (a NovaRequest) as nova-compute would; None when it does not fit.

        Checks Placement capacity, the NUMA/PCI fit (device_choice's model with this
        host's real pool order) and vGPU room on one GPU, or on a MIG host a free
        instance of the profile per vGPU (:func:`cortex.rules.device_choice.mig_choice`);
        changes nothing on failure.
        """
        resources = dict(request.resources)
        vgpus = sum(r.count for r in request.vgpu_devices)
        state = self.state("vgpu" if vgpus else "pci")
        for rc, amount in resources.items():
            inventory = state.nodes[self.name].inventories.get(rc)
            if inventory is None or inventory.refusal(amount):
                return None
        topology = state.topology
        ratios = (self.inventories["VCPU"].allocation_ratio if "VCPU" in self.inventories
                  else 1.0, 1.0)
        claim = predict_claim(topology, request, ratios[0], ratios[1], self.pack, self.order)
        if claim is None:
            return None
        predicted = claim if not self.shuffled else predict_claim(
            topology, request, ratios[0], ratios[1], self.pack)
        allocation = Allocation(resources, gpus=claim.devices, cells=claim.cells,
                                predicted=predicted.devices if predicted else ())
        if vgpus and self.mig:
            taken: list[tuple[str, int]] = []
            for wanted in request.vgpu_devices:
                found = mig_choice(topology, wanted.mig_profile, wanted.count, taken)
                if found is None:
                    return None
                taken += found
            allocation.mig = tuple(taken)
        elif any(r.mig_profile for r in request.vgpu_devices):
            return None                     # no MIG instance here (nor its trait)
        elif vgpus:
            parents = list(self.vgpus)
            index = vgpu_parent(self._vgpu_free(), vgpus)
            if index is None:
                return None
            allocation.vgpus[parents[index]] = vgpus
        if claim.cells is not None:
            self._place_cpus(allocation, request, claim.cells)
        self._apply(allocation, +1)
        self.allocations[uuid] = allocation
        return allocation

    def _place_cpus(self, allocation: Allocation, request: Any, cells: tuple[int, ...]) -> None:
        """Pin CPUs (siblings together), count shared vCPUs and memory per host cell."""
        by_id = {c.id: c for c in self.base.cells}
        isolate = request.emulator_threads_policy == "isolate"
        for index, (guest, host_cell) in enumerate(zip(request.guest_numa, cells, strict=True)):
            wanted = len(guest.pcpuset) + (1 if isolate and index == 0 else 0)
            if wanted:
                free = [cpu for core in by_id[host_cell].usable_siblings
                        for cpu in sorted(core) if cpu in by_id[host_cell].pcpuset
                        and cpu not in self.pinned[host_cell]]
                allocation.pinned[host_cell] = frozenset(free[:wanted])
            allocation.memory[host_cell] = guest.memory
            allocation.shared[host_cell] = len(guest.cpuset)

    def release(self, uuid: str) -> None:
        """Free what instance ``uuid`` holds (nothing if it holds nothing here)."""
        allocation = self.allocations.pop(uuid, None)
        if allocation is not None:
            self._apply(allocation, -1)

    def _apply(self, allocation: Allocation, sign: int) -> None:
        """Add (+1) or remove (-1) an allocation's usage."""
        for rc, amount in allocation.resources.items():
            self.used[rc] += sign * amount
        for cell, cpus in allocation.pinned.items():
            self.pinned[cell] = self.pinned[cell] | cpus if sign > 0 else self.pinned[cell] - cpus
        for cell, memory in allocation.memory.items():
            self.cell_memory[cell] += sign * memory
        for cell, vcpus in allocation.shared.items():
            self.cell_shared[cell] += sign * vcpus
        for gpu, count in allocation.vgpus.items():
            self.vgpus[gpu] += sign * count
        if sign > 0:
            self.mig_held.update(allocation.mig)
        else:
            self.mig_held.difference_update(allocation.mig)
        if sign > 0:
            self.gpus_in_use.update(allocation.gpus)
        else:
            self.gpus_in_use.difference_update(allocation.gpus)
        self._states = {}
        self._vgpu_most = None
        if self.on_change is not None:
            self.on_change(self.name)


class SimCloud:
    """The fleet's hosts and the knowledge view of them at each step.

    ``request_sizes`` (``{GPUs: requests}``) is what the views say the decision log
    recorded (``KnowledgeView.gpu_request_sizes``): the trace's own sizes, when replayed so;
    ``model_demand`` (``{GPU model: whole GPUs}``) the same for the demand per model
    (``KnowledgeView.gpu_model_demand``, :meth:`model_demand_of`). The fleet's GPUs
    never change, so their names and the supply per model are found once for every view.
    """

    def __init__(self, fleet: Fleet, pack_numa_cells: bool = False,
                 device_order: str = "pci", seed: int = 0,
                 request_sizes: Mapping[int, int] | None = None,
                 model_demand: Mapping[str, float] | None = None) -> None:
        self.fleet = fleet
        self.request_sizes = MappingProxyType(dict(request_sizes or {}))
        self.model_demand = MappingProxyType(dict(model_demand or {}))
        self._supply: tuple[Mapping[str, int], dict[str, str]] | None = None
        self.hosts = {spec.name: SimHost(spec, pack_numa_cells, device_order, seed)
                      for spec in fleet.hosts}
        self.version = 0
        self.network = build_topology({}, fleet.network)
        #: What the request being decided asks (:data:`KINDS`): the view shows hosts
        #: whose GPUs are shared any way as that kind of request sees them.
        self.kind = "pci"
        self.flexible = any(host.flexible for host in self.hosts.values())
        #: vGPUs of one GPU where GPUs are shared any way (the first such board's; 0: none)
        self.vgpu_slots = next((h.vgpu_slots for h in self.hosts.values() if h.flexible), 0)
        self._views: dict[str, KnowledgeView] = {}
        #: Per kind, the hosts changed since that kind's last view
        self._changed: dict[str, set[str]] = {kind: set() for kind in KINDS}
        for host in self.hosts.values():
            host.on_change = self._host_changed

    def _host_changed(self, name: str) -> None:
        """Host ``name`` changed: each kind's next view asks it for its state again."""
        for changed in self._changed.values():
            changed.add(name)

    def view(self) -> KnowledgeView:
        """An immutable view of every host now (unchanged hosts keep their HostState).

        The same view as last time while no host changed, as a worker keeps its view
        until the knowledge version moves; a new version after any claim or release.
        With hosts whose GPUs are shared any way, one view per :attr:`kind`. Only the
        hosts changed since the kind's last view are asked for their state (a host's
        state is a new object only after a change, :meth:`SimHost.state`).
        """
        kind = self.kind if self.flexible else "pci"
        last = self._views.get(kind)
        changed = self._changed[kind]
        if last is None:
            states = {name: host.state(kind) for name, host in self.hosts.items()}
        else:
            fresh = {name: self.hosts[name].state(kind) for name in changed}
            changed.clear()
            if all(last.hosts[name] is state for name, state in fresh.items()):
                return last
            states = {**last.hosts, **fresh}
        changed.clear()
        self.version += 1
        view = self._views[kind] = KnowledgeView(self.version, EPOCH,
                                                 MappingProxyType(states),
                                                 network=self.network,
                                                 gpu_request_sizes=self.request_sizes,
                                                 gpu_model_demand=self.model_demand)
        if self._supply is None:
            self._supply = model_supply(view), names_by_product(view)
        else:
            supply, names = self._supply
            view.derived(SUPPLY_KEY, lambda _: supply)
            view.derived(NAMES_KEY, lambda _: names)
        return view

    def model_demand_of(self, trace: Iterable[Any]) -> dict[str, float]:
        """``{GPU model: whole GPUs}`` ``trace``'s requests ask, as the decision log counts them.

        The view's ``gpu_model_demand`` had the trace been recorded before (the workload's
        own mix, as ``request_sizes``): a request's passthrough GPUs under ``any`` when it
        names no model of the fleet, else spread over the models it names in proportion
        to their GPUs (where it would go on average; the log records where it went).
        vGPU requests are not counted, as the log does not. Models as
        :func:`cortex.knowledge.gpu_names.gpu_model` names them.
        """
        now = KnowledgeView(0, EPOCH, MappingProxyType(
            {name: host.state() for name, host in self.hosts.items()}))
        names, supply = names_by_product(now), model_supply(now)
        models: dict[str, str] = {}
        for host in now.hosts.values():
            for gpu in host.topology.gpus if host.topology is not None else ():
                models.setdefault((gpu.device_id or "").lower(), gpu_model(gpu, names))
        demand: dict[str, float] = {}
        for request in trace:
            if not request.gpus:
                continue
            accepted = {models[p.lower()] for p in request.products if p.lower() in models}
            total = sum(supply[m] for m in accepted)
            for model in sorted(accepted) or [ANY_MODEL]:
                share = supply[model] / total if accepted else 1.0
                demand[model] = demand.get(model, 0.0) + request.gpus * share
        return demand

    def unallocated_gpus(self) -> float:
        """Weng et al.'s unallocated GPUs of the fleet (:meth:`SimHost.unallocated_gpus`)."""
        return sum(host.unallocated_gpus() for host in self.hosts.values())

    def free_gpu_counts(self) -> Mapping[str, tuple[int, int]]:
        """``(free, all)`` passthrough GPUs per host."""
        return {name: (host.free_gpus(), host.passthrough_gpus())
                for name, host in self.hosts.items()}
