"""A seeded GPU fleet and the Nova bodies that ask it for GPUs, for the benchmarks.

``gpu_fleet(n, seed)`` is a fleet document (the format of ``etc/cortex/demo-fleet.yaml``,
loaded with :func:`cortex.store.fleet.import_fleet`) of ``n`` GPU hosts drawn from the
shipped agent reports (``etc/cortex/topology``):

- HGX H100, 8 GPUs on NVSwitch, two NUMA cells with 1 GiB pages (36 %);
- 4 A100 PCIe joined by NVLink bridges in pairs (18 %);
- 4 L40S on PCIe, no NVLink (18 %);
- 4 A100 split by MIG into 3g.40gb instances (10 %), and HGX H100 with its second
  half split by MIG (6 %);
- 4 L40S under the time-sliced vGPU host driver, 4 vGPUs a GPU (12 %).

Each host is filled with guests drawn one by one as nova-compute would place them: a
guest of 1, 2, 4 or 8 GPUs (or vGPUs, MIG instances) takes its GPUs on one NUMA cell
where it can (both for 8), 8 pinned CPUs and 64 GiB a GPU on that cell (in 1 GiB pages
where the cell has them), until the host's drawn occupancy (none for a quarter of the
hosts, else uniform up to 90 %) is reached. Placement's usage (PCPU, MEMORY_MB, the
GPU class, VGPU) adds up what the guests hold.

``gpu_body(gpus, policy)`` is the bundled 2x H100 Nova body
(``tests/fixtures/nova/gpu-2xh100-pinned.json``) asking instead for ``gpus`` NVIDIA
GPUs of any model (one InstancePCIRequest, ``numa_policy`` ``policy``), 8 pinned
vCPUs and 64 GiB a GPU, one guest NUMA cell up to 4 GPUs and two for 8;
``vgpu_body()`` asks for one vGPU. ``names(n)`` are the hosts the bodies name.
"""

from __future__ import annotations

import copy
import json
import random
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
REPORTS = REPO / "etc" / "cortex" / "topology"
TEMPLATE = REPO / "tests" / "fixtures" / "nova" / "gpu-2xh100-pinned.json"
POLICIES = ("required", "legacy", "preferred", "socket")
GPU_SIZES = (1, 2, 4, 8)
#: (kind, share of the fleet)
KINDS = (("hgx", 0.36), ("a100-nvlink", 0.18), ("l40s", 0.18), ("a100-mig", 0.10),
         ("hgx-mig", 0.06), ("l40s-vgpu", 0.12))
CPUS_PER_GPU = 8
MEMORY_PER_GPU_MB = 65536
VGPUS_PER_GPU = 4


def _report(name: str) -> dict[str, Any]:
    return json.loads((REPORTS / f"{name}.json").read_text())


def _mig(report: dict[str, Any], gpus: range) -> dict[str, Any]:
    """``report`` with ``gpus`` (indices) in MIG mode: two free 3g.40gb instances each."""
    report = copy.deepcopy(report)
    for i in gpus:
        gpu = report["gpus"][i]
        gpu["mig"] = {"mode": "enabled", "pending": "enabled", "instances": [
            {"id": n + 1, "profile_id": 2, "profile": "3g.40gb", "placement_start": 4 * n,
             "placement_size": 4, "memory_mb": 40192, "in_use": False} for n in range(2)]}
        gpu["virtualization_mode"] = "host_vgpu"
    return report


def _vgpu(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` under the time-sliced vGPU host driver."""
    report = copy.deepcopy(report)
    for gpu in report["gpus"]:
        gpu["virtualization_mode"] = "host_vgpu"
        gpu["mig"] = {"mode": "disabled"}
    return report


def reports() -> dict[str, dict[str, Any]]:
    """The agent report of each kind of host."""
    hgx = _report("hgx-h100-8gpu")
    l40s = _report("l40s-4gpu-pcie")
    return {"hgx": hgx, "a100-nvlink": _report("a100-pcie-4gpu-nvlink-pairs"), "l40s": l40s,
            "a100-mig": _report("a100-mig-4gpu"), "hgx-mig": _mig(hgx, range(4, 8)),
            "l40s-vgpu": _vgpu(l40s)}


def _cells(report: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Per cell: its dedicated CPUs (list), memory, GPUs (indices), hugepages wanted."""
    from cortex.cpuset import parse_cpuset

    cells = {}
    for cell in report["numa_cells"]:
        cells[cell["id"]] = {"cpus": sorted(parse_cpuset(cell["dedicated_cpus"])),
                             "memory": cell["memory_mb"],
                             "gpus": [i for i, g in enumerate(report["gpus"])
                                      if g.get("numa_node") == cell["id"]]}
    return cells


def _fill(rng: random.Random, kind: str, report: dict[str, Any]) -> dict[str, Any]:
    """Guests placed on one host of ``kind``: what its topology and inventories hold."""
    gpus = report["gpus"]
    cells = _cells(report)
    # units a GPU offers: 1 passthrough GPU, its MIG instances, or its vGPUs
    units = {i: 1 if _passthrough(g) else len(_instances(g)) or VGPUS_PER_GPU
             for i, g in enumerate(gpus)}
    free = dict(units)
    pinned = {c: 0 for c in cells}
    memory = {c: 0 for c in cells}
    target = 0.0 if rng.random() < 0.25 else rng.uniform(0.05, 0.9)
    total, used, misses = sum(units.values()), 0, 0
    while used < target * total and misses < 5:
        shared = rng.random() < 0.5 if kind == "hgx-mig" else kind in ("a100-mig", "l40s-vgpu")
        pool = [i for i in units if _passthrough(gpus[i]) != shared]
        size = rng.choice(GPU_SIZES[:2] if shared else GPU_SIZES)
        placed = _place(rng, cells, pool, free, size, pinned)
        if placed is None:
            misses += 1
            continue
        for c in placed:
            pinned[c] += CPUS_PER_GPU * size // len(placed)
            memory[c] += MEMORY_PER_GPU_MB * size // len(placed)
        used += size
    return _usage(kind, report, cells, units, free, pinned, memory)


def _instances(gpu: dict[str, Any]) -> list[dict[str, Any]]:
    return (gpu.get("mig") or {}).get("instances") or []


def _place(rng: random.Random, cells: dict[int, Any], pool: list[int], free: dict[int, int],
           size: int, pinned: dict[int, int]) -> tuple[int, ...] | None:
    """Take ``size`` units of ``pool``'s GPUs on one cell (or all for 8); the cells used."""
    for cell in sorted(cells, key=lambda c: rng.random()):
        room = len(cells[cell]["cpus"]) - pinned[cell]
        local = [g for g in cells[cell]["gpus"] if g in pool and free[g] > 0]
        if room >= CPUS_PER_GPU * size and sum(free[g] for g in local) >= size:
            _take(local, free, size)
            return (cell,)
    spread = [g for g in pool if free[g] > 0]
    share = CPUS_PER_GPU * size // len(cells)
    if size == 8 and sum(free[g] for g in spread) >= 8 and all(
            len(cells[c]["cpus"]) - pinned[c] >= share for c in cells):
        _take(spread, free, size)
        return tuple(cells)
    return None


def _take(gpus: list[int], free: dict[int, int], size: int) -> None:
    """Take ``size`` units of ``gpus``, the GPUs already in use first."""
    for g in sorted(gpus, key=lambda g: free[g]):
        taken = min(free[g], size)
        free[g] -= taken
        size -= taken


def _usage(kind: str, report: dict[str, Any], cells: dict[int, Any], units: dict[int, int],
           free: dict[int, int], pinned: dict[int, int], memory: dict[int, int]
           ) -> dict[str, Any]:
    """The fleet host's ``topology`` usage and Placement inventories."""
    report = copy.deepcopy(report)
    gpus = report["gpus"]
    topology: dict[str, Any] = {"report": report, "cells": {},
                                "gpus_in_use": [g["pci_address"] for i, g in enumerate(gpus)
                                                if _passthrough(g) and free[i] == 0]}
    mig = {g["pci_address"]: [inst["id"] for inst in _instances(g)[:units[i] - free[i]]]
           for i, g in enumerate(gpus) if _instances(g) and units[i] > free[i]}
    if mig:
        topology["mig_in_use"] = mig
    for i, gpu in enumerate(gpus):
        if gpu.get("virtualization_mode") == "host_vgpu" and not _instances(gpu):
            gpu["vgpus_in_use"] = units[i] - free[i]
    for c, cell in cells.items():
        usage: dict[str, Any] = {"memory_usage_mb": memory[c]}
        if pinned[c]:
            usage["pinned_cpus"] = ",".join(map(str, cell["cpus"][:pinned[c]]))
        if kind.startswith("hgx"):  # half of an HGX cell's memory in 1 GiB pages
            pages = cell["memory"] // 2 // 1024
            usage["hugepages"] = {"1048576": {"total": pages,
                                              "used": min(pages, memory[c] // 1024)}}
        topology["cells"][str(c)] = usage
    return {"topology": topology, "inventories": _inventories(gpus, cells, units, free,
                                                              pinned, memory)}


def _inventories(gpus: list[dict[str, Any]], cells: dict[int, Any], units: dict[int, int],
                 free: dict[int, int], pinned: dict[int, int], memory: dict[int, int]
                 ) -> dict[str, Any]:
    """Placement's inventories and usage of the host."""
    inventories = {
        "PCPU": {"total": sum(len(c["cpus"]) for c in cells.values()),
                 "used": sum(pinned.values())},
        "VCPU": {"total": 16, "allocation_ratio": 2.0},
        "MEMORY_MB": {"total": sum(c["memory"] for c in cells.values()), "reserved": 65536,
                      "used": sum(memory.values())},
        "DISK_GB": {"total": 3576, "used": 0}}
    whole = [i for i, g in enumerate(gpus) if _passthrough(g)]
    if whole:
        product = gpus[whole[0]]["device_id"].upper()
        inventories[f"CUSTOM_PCI_10DE_{product}"] = {
            "total": len(whole), "used": sum(1 for i in whole if free[i] == 0)}
    shared = [i for i, g in enumerate(gpus) if not _passthrough(g)]
    if shared:
        inventories["VGPU"] = {"total": sum(units[i] for i in shared),
                               "used": sum(units[i] - free[i] for i in shared)}
    return inventories


def _passthrough(gpu: dict[str, Any]) -> bool:
    return (gpu.get("mig") or {}).get("mode") != "enabled" and \
        gpu.get("virtualization_mode") not in ("host_vgpu", "host_vsga")


def names(n: int) -> list[str]:
    """The fleet's host names, in order."""
    return [f"gpu{i:05d}" for i in range(n)]


def gpu_fleet(n: int, seed: int = 1) -> dict[str, Any]:
    """The fleet document of ``n`` GPU hosts (see the module docstring)."""
    rng = random.Random(seed)
    kinds, shares = zip(*KINDS, strict=True)
    shipped = reports()
    hosts = []
    for name in names(n):
        kind = rng.choices(kinds, shares)[0]
        filled = _fill(rng, kind, shipped[kind])
        hosts.append({"host": name, "node": f"{name}.cloud.example",
                      "uuid": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                      "availability_zone": "az-1", "hypervisor_type": "QEMU",
                      "hypervisor_version": 8002000, "cpu_arch": "x86_64",
                      "traits": ["COMPUTE_NODE", "HW_CPU_HYPERTHREADING"], **filled})
    return {"hosts": hosts}


def _named(body: dict[str, Any], hosts: list[str]) -> dict[str, Any]:
    """``body`` offering ``hosts``, with caller weights spread over [-5, 5)."""
    body["hosts"] = [{"host": h, "hypervisor_hostname": f"{h}.cloud.example"} for h in hosts]
    body["weights"] = {h: ((i * 7919) % 1000) / 100 - 5 for i, h in enumerate(hosts)}
    return body


def gpu_body(gpus: int, policy: str, hosts: list[str]) -> dict[str, Any]:
    """A Nova body for ``gpus`` NVIDIA GPUs under ``policy`` (see the module docstring)."""
    body = json.loads(TEMPLATE.read_text())
    spec = body["spec"]["nova_object.data"]
    flavor = spec["flavor"]["nova_object.data"]
    flavor.update(name=f"g.{gpus}gpu", vcpus=CPUS_PER_GPU * gpus,
                  memory_mb=MEMORY_PER_GPU_MB * gpus)
    flavor["extra_specs"] = {"hw:cpu_policy": "dedicated",
                             "hw:numa_nodes": "1" if gpus <= 4 else "2",
                             "pci_passthrough:alias": f"nvidia:{gpus}"}
    spec["numa_topology"] = None
    spec["pci_requests"] = {"nova_object.data": {"requests": [{"nova_object.data": {
        "count": gpus, "spec": [{"vendor_id": "10de"}], "alias_name": "nvidia",
        "numa_policy": policy, "request_id": None}}]}}
    spec["instance_uuid"] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"bench/{gpus}/{policy}"))
    return _named(body, hosts)


def vgpu_body(hosts: list[str]) -> dict[str, Any]:
    """A Nova body for one vGPU (``resources:VGPU=1``), 8 pinned vCPUs, 32 GiB."""
    body = json.loads(TEMPLATE.read_text())
    spec = body["spec"]["nova_object.data"]
    flavor = spec["flavor"]["nova_object.data"]
    flavor.update(name="g.1vgpu", vcpus=8, memory_mb=32768)
    flavor["extra_specs"] = {"hw:cpu_policy": "dedicated", "resources:VGPU": "1"}
    spec["numa_topology"] = None
    spec["pci_requests"] = {"nova_object.data": {"requests": []}}
    spec["instance_uuid"] = str(uuid.uuid5(uuid.NAMESPACE_URL, "bench/vgpu"))
    return _named(body, hosts)


def bodies(hosts: list[str]) -> dict[str, dict[str, Any]]:
    """Every benchmark body by name (``2gpu-required``, ..., ``1vgpu``)."""
    found = {f"{g}gpu-{p}": gpu_body(g, p, hosts) for g in GPU_SIZES for p in POLICIES}
    found["1vgpu"] = vgpu_body(hosts)
    return found
