"""The Nova side of the differential: generate hosts and requests with Nova's own objects and
judge every pair with Nova's real NUMATopologyFilter and PciPassthroughFilter.

Runs only inside the Nova virtualenv (:mod:`tests.differential.nova_venv`); imports nothing
of Cortex. ``python nova_side.py --seed S --requests R --hosts H --candidates C`` writes
JSON lines to stdout:

* ``{"kind": "host", "host": name, "report": TopologyReport, "cpu_allocation_ratio": float,
  "ram_allocation_ratio": float, "vgpu": bool}``: the host as cortex-agent would report it,
  and the same facts as Nova's ``NUMATopology``/``PciDevicePoolList`` (built from them);
* ``{"kind": "request", "id": n, "knobs": {...}, "body": hook body,
  "nova": {host: bool}, "truth": {host: bool}}``: the body SAP's hook would POST
  (``RequestSpec.obj_to_primitive()``), Nova's verdict per candidate (both filters through
  ``BaseHostFilter._filter_one`` on a ``HostState``, so ``RUN_ON_REBUILD`` holds), and the
  order-independent truth: the same Nova cell check (``hardware._numa_fit_instance_cell``)
  on fresh copies for every assignment of guest cells to host cells, without
  ``numa_fit_instance_to_host``'s caches, which key on the guest cell ids it rewrites.

Requests are drawn by a seeded ``random.Random``; a request Nova's API refuses
(``numa_get_constraints`` or the alias lookup raise) is drawn again, since Nova never
sends it.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import random
import sys
import uuid

from nova import objects
from nova.conf import CONF

objects.register_all()

from nova import context as nova_context  # noqa: E402
from nova import exception  # noqa: E402
from nova.pci import request as pci_request  # noqa: E402
from nova.pci import stats as pci_stats  # noqa: E402
from nova.scheduler import host_manager, request_filter  # noqa: E402
from nova.scheduler.filters import numa_topology_filter, pci_passthrough_filter  # noqa: E402
from nova.virt import hardware  # noqa: E402

#: PCI device kinds: (alias, vendor_id, product_id, dev_type, alias numa_policy or None).
DEVICES = (("h100", "10de", "2330", "type-PCI", None),
           ("a100", "10de", "20b5", "type-PCI", None),
           ("l40s", "10de", "26b9", "type-PCI", "required"),
           ("nic", "8086", "1520", "type-PCI", "socket"),
           ("pf", "8086", "1572", "type-PF", "preferred"))
PAGE_4K, PAGE_2M, PAGE_1G = 4, 2048, 1048576


def configure(reports: list[dict] = ()) -> None:
    """Nova's ``[pci] alias`` for :data:`DEVICES` and the recorded machines' GPUs.

    device_type and numa_policy as given; a recorded GPU model gets the alias
    :func:`recorded_alias` names, with no policy (``legacy``).
    """
    aliases = []
    for name, vendor, product, dev_type, policy in DEVICES + recorded_devices(reports):
        alias = {"name": name, "vendor_id": vendor, "product_id": product,
                 "device_type": dev_type}
        if policy:
            alias["numa_policy"] = policy
        aliases.append(json.dumps(alias))
    CONF([], project="nova", default_config_files=[])
    CONF.set_override("alias", aliases, group="pci")
    products = dict.fromkeys((v, p) for _, v, p, _, _ in DEVICES + recorded_devices(reports))
    CONF.set_override("device_spec", [json.dumps({"vendor_id": v, "product_id": p})
                                      for v, p in products], group="pci")


def recorded_alias(vendor: str, product: str) -> str:
    """The alias of a recorded machine's GPU model: ``rec-10de-2335``."""
    return f"rec-{vendor}-{product}"


def recorded_devices(reports: list[dict]) -> tuple:
    """:data:`DEVICES`-shaped entries for the GPU models of recorded reports.

    Each model gets an alias of its own (:func:`recorded_alias`), also one DEVICES has
    under another name: Nova takes several aliases of one product.
    """
    found = sorted({(g["vendor_id"], g["device_id"], g["dev_type"])
                    for r in reports for g in r["gpus"]})
    return tuple((recorded_alias(v, p), v, p, t, None) for v, p, t in found)


def recorded_host(report: dict) -> dict:
    """A host line for an agent report recorded on a real machine (ratios 1.0, no traits)."""
    return {"kind": "host", "host": report["host"], "traits": [], "cpu_allocation_ratio": 1.0,
            "ram_allocation_ratio": 1.0, "vgpu": False, "report": report}


def _mig_mode(gpu: dict) -> bool:
    """Whether the GPU is in MIG mode (then it is no PCI device to Nova)."""
    return (gpu.get("mig") or {}).get("mode") == "enabled"


# --------------------------------------------------------------------------- hosts

def make_host(rng: random.Random, index: int) -> dict:
    """One host: NUMA cells, pages, PCI devices, GPUs in MIG mode; as an agent report."""
    ncells = rng.choice((1, 2, 2, 2, 3, 4))
    threads = rng.choice((1, 2, 2))
    per_socket = rng.choice((1, 2))
    mode = rng.choice(("split", "split", "dedicated", "shared", "legacy"))
    null_socket = rng.random() < 0.15
    cells, cpu = [], 0
    for cid in range(ncells):
        cores = rng.randint(2, 8)
        ids = list(range(cpu, cpu + cores * threads))
        cpu += len(ids)
        siblings = [ids[c * threads:(c + 1) * threads] for c in range(cores)]
        if mode == "split":
            k = rng.randint(1, cores - 1)
            dedicated = [c for s in siblings[:k] for c in s]
            shared = [c for s in siblings[k:] for c in s]
        elif mode == "dedicated":
            dedicated, shared = ids, []
        elif mode == "shared":
            dedicated, shared = [], ids
        else:  # no cpu_dedicated_set: libvirt reports every CPU in both sets
            dedicated, shared = ids, ids
        pinned = sorted(rng.sample(dedicated, rng.randint(0, len(dedicated) // 2))) \
            if dedicated and rng.random() < 0.5 else []
        memory = rng.choice((4096, 8192, 16384, 32768))
        mempages = []
        if rng.random() < 0.92:
            huge2m = rng.choice((0, 0, 512, 1024, 4096))
            huge1g = rng.choice((0, 0, 0, 2, 4, 8))
            small = max(0, memory * 256 - huge2m * 512 - huge1g * 262144)
            mempages.append({"size_kb": PAGE_4K, "total": small,
                             "used": rng.randint(0, small // 2) if rng.random() < 0.5 else 0,
                             "reserved": 0})
            for size, total in ((PAGE_2M, huge2m), (PAGE_1G, huge1g)):
                if total or rng.random() < 0.3:
                    used = rng.randint(0, total)
                    mempages.append({"size_kb": size, "total": total, "used": used,
                                     "reserved": rng.randint(0, total - used)
                                     if rng.random() < 0.3 else 0})
        socket = None if null_socket and cid == ncells - 1 else cid // per_socket
        cells.append({
            "id": cid, "socket": socket, "cpus": _cpulist(ids),
            "dedicated_cpus": _cpulist(dedicated), "shared_cpus": _cpulist(shared),
            "siblings": [_cpulist(s) for s in siblings],
            "memory_mb": memory,
            "memory_usage_mb": rng.randint(0, memory // 2) if rng.random() < 0.5 else 0,
            "cpu_usage": rng.randint(0, 2 * len(shared)) if shared else 0,
            "pinned_cpus": _cpulist(pinned), "mempages": mempages,
        })
    gpus, slot = [], 0
    for _, vendor, product, dev_type, _ in DEVICES:
        for _ in range(rng.choice((0, 0, 1, 2, 3))):
            node = None if rng.random() < 0.15 else rng.randrange(ncells)
            slot += 1
            gpus.append({"pci_address": f"0000:{slot:02x}:00.0", "vendor_id": vendor,
                         "device_id": product, "dev_type": dev_type,
                         "pci_numa_node": node, "numa_node": node,
                         "in_use": rng.random() < 0.2})
    vgpu = rng.random() < 0.3
    if vgpu:  # a MIG-mode GPU: no passthrough device, vGPUs through Placement only
        slot += 1
        instances = [{"id": i, "profile_id": 9, "profile": "3g.40gb",
                      "in_use": rng.random() < 0.5} for i in range(2)]
        gpus.append({"pci_address": f"0000:{slot:02x}:00.0", "vendor_id": "10de",
                     "device_id": "2330", "pci_numa_node": 0, "numa_node": 0,
                     "virtualization_mode": "host_vgpu",
                     "mig": {"mode": "enabled", "instances": instances}})
    # a Nova 34 compute reports COMPUTE_NODE and OWNER_NOVA on its provider; Cortex's
    # knowledge of a host from a fleet file or an older sync may hold no trait at all
    traits = ["COMPUTE_NODE", "OWNER_NOVA"] if rng.random() < 0.5 else []
    return {"kind": "host", "host": f"cmp{index:04d}", "traits": traits,
            "cpu_allocation_ratio": rng.choice((1.0, 1.0, 2.0, 4.0)),
            "ram_allocation_ratio": rng.choice((1.0, 1.0, 1.5)),
            "vgpu": vgpu,
            "report": {"numa_cells": cells, "gpus": gpus, "gpu_links": []}}


def _cpulist(ids) -> str:
    """``0-3,8`` for a CPU id list."""
    ids, parts = sorted(set(ids)), []
    for _, group in itertools.groupby(enumerate(ids), lambda x: x[1] - x[0]):
        run = [c for _, c in group]
        parts.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ",".join(parts)


def _ids(text: str) -> set[int]:
    """The CPU ids of a ``0-3,8`` list."""
    out: set[int] = set()
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def host_state(host: dict) -> host_manager.HostState:
    """Nova's HostState of a generated host: NUMATopology and PciDeviceStats from its facts.

    Pools as the PCI tracker builds them (``PciDeviceStats.pool_keys``: vendor, product,
    NUMA node, dev_type) from the free devices; a MIG-mode GPU is no PCI device to Nova.
    """
    cells = []
    for c in host["report"]["numa_cells"]:
        cells.append(objects.NUMACell(
            id=c["id"], socket=c["socket"], cpuset=_ids(c["shared_cpus"]),
            pcpuset=_ids(c["dedicated_cpus"]), memory=c["memory_mb"],
            memory_usage=c["memory_usage_mb"], cpu_usage=c["cpu_usage"],
            pinned_cpus=_ids(c["pinned_cpus"]),
            siblings=[_ids(s) for s in c["siblings"]],
            mempages=[objects.NUMAPagesTopology(**p) for p in c["mempages"]],
            network_metadata=objects.NetworkMetadata(physnets=set(), tunneled=False)))
    topology = objects.NUMATopology(cells=cells)
    counts: dict[tuple, int] = {}
    for g in host["report"]["gpus"]:
        if g.get("in_use") or _mig_mode(g):
            continue
        key = (g["vendor_id"], g["device_id"], g["pci_numa_node"], g["dev_type"])
        counts[key] = counts.get(key, 0) + 1
    pools = objects.PciDevicePoolList(objects=[
        objects.PciDevicePool(vendor_id=v, product_id=p, numa_node=n, count=k,
                              tags={"dev_type": t})
        for (v, p, n, t), k in counts.items()])
    state = host_manager.HostState(host["host"], host["host"], uuid.uuid4().hex)
    state.numa_topology = topology
    state.pci_stats = pci_stats.PciDeviceStats(topology, stats=pools)
    state.cpu_allocation_ratio = host["cpu_allocation_ratio"]
    state.ram_allocation_ratio = host["ram_allocation_ratio"]
    return state


# --------------------------------------------------------------------------- requests

def make_request(rng: random.Random) -> tuple[dict, dict, dict, str]:
    """``(extra_specs, image properties, knobs, intent)`` of one drawn request."""
    vcpus = rng.choice((1, 2, 2, 2, 4, 4, 6, 8))
    memory = rng.choice((512, 1024, 1024, 2048, 2048, 4096, 8192))
    specs: dict[str, str] = {}
    image: dict[str, str] = {}
    nodes = rng.choice((None, None, 1, 2, 2, 3))
    if nodes:
        where = specs if rng.random() < 0.8 else image
        where["hw:numa_nodes" if where is specs else "hw_numa_nodes"] = str(nodes)
        if where is specs and nodes > 1 and rng.random() < 0.4:
            cpus = list(range(vcpus))
            rng.shuffle(cpus)
            cuts = sorted(rng.sample(range(1, vcpus), nodes - 1)) if vcpus >= nodes else []
            if len(cuts) == nodes - 1 and memory // 256 > nodes:
                parts = [cpus[a:b] for a, b in zip([0, *cuts], [*cuts, vcpus], strict=True)]
                mem_cuts = sorted(rng.sample(range(1, memory // 256), nodes - 1))
                mems = [(b - a) * 256 for a, b in
                        zip([0, *mem_cuts], [*mem_cuts, memory // 256], strict=True)]
                for n in range(nodes):
                    specs[f"hw:numa_cpus.{n}"] = ",".join(map(str, sorted(parts[n])))
                    specs[f"hw:numa_mem.{n}"] = str(mems[n])
    policy = rng.choice((None, None, "dedicated", "dedicated", "shared", "mixed", "pcpu"))
    if policy == "pcpu":
        specs["resources:PCPU"] = str(vcpus)
    elif policy == "mixed":
        if vcpus < 2:
            policy = "dedicated"
            specs["hw:cpu_policy"] = policy
        else:
            specs["hw:cpu_policy"] = "mixed"
            if rng.random() < 0.3:  # the realtime mask names the shared vCPUs instead
                specs["hw:cpu_realtime"] = "yes"
                specs["hw:cpu_realtime_mask"] = f"^0-{rng.randint(0, vcpus - 2)}"
            else:
                specs["hw:cpu_dedicated_mask"] = f"0-{rng.randint(0, vcpus - 2)}"
    elif policy and rng.random() < 0.8:
        specs["hw:cpu_policy"] = policy
    elif policy:
        image["hw_cpu_policy"] = policy
    if policy in ("dedicated", "pcpu") and rng.random() < 0.5:
        thread = rng.choice(("prefer", "isolate", "require"))
        if rng.random() < 0.8:
            specs["hw:cpu_thread_policy"] = thread
        else:
            image["hw_cpu_thread_policy"] = thread
    if policy in ("dedicated", "mixed") and rng.random() < 0.15:
        specs["hw:emulator_threads_policy"] = "isolate"
    page = rng.choice((None, None, None, "small", "large", "any", "4", "2MB", "1GB", "2048"))
    if page:
        specs["hw:mem_page_size"] = page
        if page in ("large", "any") and rng.random() < 0.3:
            image["hw_mem_page_size"] = rng.choice(("2MB", "1GB"))
    pci = rng.random() < 0.5
    if pci:
        asks = rng.sample(DEVICES, rng.choice((1, 1, 2)))
        specs["pci_passthrough:alias"] = ",".join(f"{a[0]}:{rng.choice((1, 1, 2, 3))}"
                                                 for a in asks)
        affinity = rng.choice((None, None, "required", "legacy", "preferred", "socket"))
        if affinity and rng.random() < 0.7:
            specs["hw:pci_numa_affinity_policy"] = affinity
        elif affinity:
            image["hw_pci_numa_affinity_policy"] = affinity
    if rng.random() < 0.12:
        specs["resources:VGPU"] = "1"
    intent = rng.choice(("create",) * 10 + ("rebuild", "resize", "live_migrate"))
    knobs = {"vcpus": vcpus, "memory_mb": memory, "intent": intent,
             "pci_in_placement": pci and rng.random() < 0.4}
    return specs, image, knobs, intent


def build_spec(specs: dict, image: dict, knobs: dict) -> objects.RequestSpec:
    """The RequestSpec Nova's API would build (raises what Nova's API raises)."""
    flavor = objects.Flavor(
        id=1, flavorid="f1", name="gen", vcpus=knobs["vcpus"], memory_mb=knobs["memory_mb"],
        root_gb=10, ephemeral_gb=0, swap=0, extra_specs=specs, rxtx_factor=1.0,
        vcpu_weight=0, disabled=False, is_public=True, description=None)
    image_meta = objects.ImageMeta.from_dict({"properties": image, "name": "img",
                                              "id": str(uuid.UUID(int=7))})
    numa = hardware.numa_get_constraints(flavor, image_meta)
    affinity = hardware.get_pci_numa_policy_constraint(flavor, image_meta)
    pci = pci_request.get_pci_requests_from_flavor(flavor, affinity_policy=affinity)
    ctx = nova_context.RequestContext(user_id="u", project_id="p")
    spec = objects.RequestSpec.from_components(
        ctx, str(uuid.UUID(int=knobs["id"] + 1)), image_meta, flavor, numa, pci, {}, None,
        None, project_id="p", user_id="u")
    CONF.set_override("pci_in_placement", bool(knobs.get("pci_in_placement")),
                      group="filter_scheduler")
    try:
        spec.generate_request_groups_from_pci_requests()
    finally:
        CONF.clear_override("pci_in_placement", group="filter_scheduler")
    # nova/scheduler/manager.py select_destinations runs request_filter.process_reqspec
    # before the filters: the I/O-free pre-filters here, owner_nova_filter as when every
    # nova-compute reports service version 73 (_should_filter_by_owner asks the database)
    request_filter.compute_status_filter(ctx, spec)
    request_filter._should_filter_by_owner = lambda context: True
    request_filter.owner_nova_filter(ctx, spec)
    spec.scheduler_hints = {}
    if knobs["intent"] != "create":
        spec.scheduler_hints["_nova_check_type"] = [knobs["intent"]]
    return spec


def body_of(spec: objects.RequestSpec, intent: str, hosts: list[str]) -> dict:
    """The hook's body: spec primitive, context, flags, candidates and weights."""
    return {
        "spec": spec.obj_to_primitive(),
        "context": context_of(spec),
        "rebuild": intent == "rebuild", "resize": intent == "resize",
        "live": intent == "live_migrate", "vmware": False,
        "hosts": [{"host": h, "hypervisor_hostname": h} for h in hosts],
        "weights": {h: float(-i) for i, h in enumerate(hosts)},
    }


def context_of(spec: objects.RequestSpec) -> dict:
    """The hook's ``context``: oslo.context's ``to_dict()`` without the token."""
    ctx = nova_context.RequestContext(
        user_id="u", project_id="p", project_name="demo", user_name="demo",
        roles=["member", "reader"], request_id=f"req-{spec.instance_uuid}",
        global_request_id=f"req-{uuid.UUID(int=1)}", remote_address="10.0.0.1",
        timestamp="2026-01-01T00:00:00.000000")  # fixed: the output must not depend on the clock
    data = ctx.to_dict()
    data.pop("auth_token", None)
    return data


# --------------------------------------------------------------------------- verdicts

def nova_verdict(host: dict, spec: objects.RequestSpec) -> bool:
    """Both filters as the filter handler runs them (``_filter_one`` honours rebuild)."""
    state = host_state(host)
    state.allocation_candidates = [{"mappings": {}}]
    numa = numa_topology_filter.NUMATopologyFilter()
    pci = pci_passthrough_filter.PciPassthroughFilter()
    return bool(numa._filter_one(state, spec) and pci._filter_one(state, spec))


def nova_claim(host: dict, spec: objects.RequestSpec) -> list[str] | None:
    """The PCI addresses nova-compute hands the instance on a fresh tracker of ``host``.

    As the compute's claim does (``nova/compute/claims.py`` then
    ``PciDevTracker.claim_instance``): the instance's NUMA cells fitted by
    ``hardware.numa_fit_instance_to_host`` with the PCI requests and stats, then
    ``PciDeviceStats.consume_requests`` on those cells. The free devices are added in
    PCI address order, as the tracker adds them at start. ``[]`` without PCI requests;
    None when the claim fails.
    """
    state = host_state(host)
    stats = pci_stats.PciDeviceStats(state.numa_topology)
    for g in sorted(host["report"]["gpus"], key=lambda g: g["pci_address"]):
        if g.get("in_use") or _mig_mode(g):
            continue
        stats.add_device(objects.PciDevice(
            compute_node_id=1, address=g["pci_address"], vendor_id=g["vendor_id"],
            product_id=g["device_id"], numa_node=g["pci_numa_node"], dev_type=g["dev_type"],
            status="available", parent_addr=None, request_id=None, instance_uuid=None,
            extra_info={}, dev_id=f"pci_{g['pci_address']}", label="label"))
    requests = list(spec.pci_requests.requests) if spec.pci_requests else []
    if not requests:
        return []
    cells = None
    if spec.numa_topology:
        limits = objects.NUMATopologyLimits(cpu_allocation_ratio=host["cpu_allocation_ratio"],
                                            ram_allocation_ratio=host["ram_allocation_ratio"])
        fitted = hardware.numa_fit_instance_to_host(
            state.numa_topology, copy.deepcopy(spec.numa_topology), limits=limits,
            pci_requests=requests, pci_stats=stats, provider_mapping=None)
        if fitted is None:
            return None
        cells = fitted.cells
    try:
        devices = stats.consume_requests(requests, cells)
    except exception.PciDeviceRequestFailed:
        return None
    return [d.address for d in devices] if devices else None


def truth_verdict(host: dict, spec: objects.RequestSpec) -> bool:
    """Nova's rules without the order: any assignment of cells where every cell fits.

    Each cell checked by ``hardware._numa_fit_instance_cell`` on a fresh copy (guest
    cell 0 carries the isolated emulator thread), the PCI requests by
    ``PciDeviceStats.support_requests`` on the cells chosen, then PciPassthroughFilter.

    Nova's own answer can differ, because ``numa_fit_instance_to_host`` hands the same
    guest cell objects to every attempt: (a) ``_numa_fit_instance_cell`` writes the page
    size it picked for ``small``/``large``/``any`` into the guest cell before its CPU
    and limit checks, so after a host cell that failed those, the next ones are asked
    for that exact size (Nova refuses a host where a fit exists); (b) it rewrites the
    guest cell's ``id`` to the host cell's, and the fit/no-fit caches key on ``(host
    cell id, guest cell id)``, so a pair is taken as fitting, or not, on the verdict of
    another guest cell that carried that id (Nova refuses a host where a fit exists, or
    keeps one where none does: a guest cell with a shared vCPU "fits" a cell with no
    shared CPU). Which host cells are tried first follows the cells' sort (free memory,
    CPU usage or free pinned CPUs, PCI devices).
    """
    state = host_state(host)
    state.allocation_candidates = [{"mappings": {}}]
    if hardware_request_is_rebuild(spec):
        return True
    numa = numa_topology_filter.NUMATopologyFilter()
    flavor_specs, props = spec.flavor.extra_specs, spec.image.properties
    if not numa._satisfies_cpu_policy(state, flavor_specs, props):
        return False
    pci_ok = pci_passthrough_filter.PciPassthroughFilter()._filter_one(state, spec)
    guest = spec.numa_topology
    if not guest:
        return bool(pci_ok)
    host_cells = state.numa_topology.cells
    limits = objects.NUMATopologyLimits(cpu_allocation_ratio=state.cpu_allocation_ratio,
                                        ram_allocation_ratio=state.ram_allocation_ratio)
    requests = spec.pci_requests.requests if spec.pci_requests else []
    for perm in itertools.permutations(host_cells, len(guest.cells)):
        chosen = []
        for index, (host_cell, cell) in enumerate(zip(perm, guest.cells, strict=False)):
            reserved = 1 if guest.emulator_threads_isolated and index == 0 else 0
            try:
                got = hardware._numa_fit_instance_cell(host_cell, copy.deepcopy(cell),
                                                       limits, reserved)
            except exception.MemoryPageSizeNotSupported:
                got = None
            if got is None:
                break
            chosen.append(got)
        if len(chosen) != len(guest.cells):
            continue
        if requests and not state.pci_stats.support_requests(requests, {}, chosen):
            continue
        return bool(pci_ok)
    return False


def hardware_request_is_rebuild(spec) -> bool:
    """Nova's ``scheduler.utils.request_is_rebuild``."""
    from nova.scheduler import utils
    return utils.request_is_rebuild(spec)


def judge(fleet: list[dict], specs: dict, image: dict, knobs: dict,
          chosen: list[dict]) -> dict | None:
    """One request over ``chosen`` hosts: body and verdicts, or None if Nova's API refuses it.

    ``knobs``: ``vcpus``, ``memory_mb``, ``intent``, ``id``. Hosts Placement would not
    have returned for ``resources:VGPU`` (a MIG GPU with no free instance) are left out
    first; a rebuild keeps only the first host (nova/compute/api.py API.rebuild pins the
    instance's host and node in ``force_hosts``/``force_nodes``).
    """
    try:
        spec = build_spec(specs, image, knobs)
    except (exception.Invalid, exception.PciInvalidAlias, ValueError):
        return None
    if "resources:VGPU" in specs:
        chosen = [h for h in chosen if not h["vgpu"] or any(
            not i["in_use"] for g in h["report"]["gpus"] if g.get("mig")
            for i in g["mig"]["instances"])]
    if not chosen:
        return None
    if knobs["intent"] == "rebuild":
        chosen = chosen[:1]
        spec.force_hosts = [chosen[0]["host"]]
        spec.force_nodes = [chosen[0]["host"]]
    names = [h["host"] for h in chosen]
    return {"kind": "request", "id": knobs["id"], "specs": specs, "image": image,
            "knobs": knobs, "body": body_of(spec, knobs["intent"], names),
            "nova": {h["host"]: nova_verdict(h, spec) for h in chosen},
            "claims": {h["host"]: nova_claim(h, spec) for h in chosen},
            "truth": {h["host"]: truth_verdict(h, spec) for h in chosen}}


def generate(seed: int, requests: int, hosts: int, candidates: int, out) -> None:
    """Write the hosts, then each request with Nova's verdicts, as JSON lines."""
    configure()
    rng = random.Random(seed)
    fleet = [make_host(rng, i) for i in range(hosts)]
    for host in fleet:
        out.write(json.dumps(host) + "\n")
    made = 0
    while made < requests:
        specs, image, knobs, _ = make_request(rng)
        knobs["id"] = made
        line = judge(fleet, specs, image, knobs, rng.sample(fleet, min(candidates, hosts)))
        if line is not None:
            out.write(json.dumps(line) + "\n")
            made += 1


def serve(seed: int, hosts: int, stdin, out, reports: list[dict] = ()) -> None:
    """Answer requests drawn elsewhere (hypothesis, in Cortex's interpreter), one per line.

    First writes the fleet (one JSON line of host lines: the generated hosts, then one per
    recorded agent report); then for each input line ``{"specs", "image", "knobs",
    "hosts": [names]}`` writes :func:`judge`'s line, or ``{"kind": "invalid"}`` when
    Nova's API refuses the request.
    """
    configure(reports)
    rng = random.Random(seed)
    fleet = [make_host(rng, i) for i in range(hosts)] + [recorded_host(r) for r in reports]
    by_name = {h["host"]: h for h in fleet}
    out.write(json.dumps(fleet) + "\n")
    out.flush()
    for raw in stdin:
        ask = json.loads(raw)
        line = judge(fleet, ask["specs"], ask["image"], ask["knobs"],
                     [by_name[n] for n in ask["hosts"]])
        out.write(json.dumps(line or {"kind": "invalid"}) + "\n")
        out.flush()


def main() -> None:
    """Command line: ``--seed --requests --hosts --candidates [--serve [--reports FILE...]]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--requests", type=int, default=130)
    parser.add_argument("--hosts", type=int, default=300)
    parser.add_argument("--candidates", type=int, default=40)
    parser.add_argument("--serve", action="store_true",
                        help="judge requests read from stdin (see serve)")
    parser.add_argument("--reports", nargs="*", default=[], metavar="FILE",
                        help="with --serve: agent reports of real machines to add as hosts")
    args = parser.parse_args()
    if args.serve:
        reports = [json.loads(open(path, encoding="utf-8").read()) for path in args.reports]
        serve(args.seed, args.hosts, sys.stdin, sys.stdout, reports)
    else:
        generate(args.seed, args.requests, args.hosts, args.candidates, sys.stdout)


if __name__ == "__main__":
    main()
