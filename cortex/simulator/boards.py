"""GPU server boards: a compact description turned into an agent report and Placement inventories.

A board names what cortex-agent would find on a server (the keys of the layouts in
``tests/fixtures/topology``, which the agent's tests run on): ``sockets``,
``nodes_per_socket``, ``cores_per_socket``, ``threads_per_core``,
``memory_mb_per_node``; Nova's ``[compute] cpu_dedicated_set``/``cpu_shared_set``
(``dedicated_cpus``, ``shared_cpus``; default every CPU but the first core of each
socket dedicated) and ``cpu_allocation_ratio``; the GPU model (``gpu``: ``product_id``,
``name``, ``memory_mb``, ``idle_watts``, ``busy_watts``); the GPUs (``gpus``: ``pci``,
``node``, ``pcie`` = root port then switches; or ``gpu_count``, spread evenly over the
NUMA nodes, each on its own root port); ``nvlink`` (``kind``: ``none``, ``nvswitch``
or ``full`` = every pair, ``bridges`` = the ``pairs`` given, ``mesh`` = DGX-1's hybrid
cube-mesh of 8 GPUs); ``vgpu_slots`` makes the GPUs time-sliced vGPU devices of that
many vGPUs each instead of passthrough devices; ``mig`` (``layouts``: per GPU the MIG
profiles the operator created on it, cycled over the GPUs) puts every GPU in MIG mode
with those GPU instances, free, as MIG-backed vGPU hosts have them before any guest
(:func:`mig_layouts`).

CPU ids follow Linux's numbering (thread x all cores + socket x cores + core) and the
PCIe topology level of a pair follows NVML's rules (``SYSTEM`` across NUMA nodes,
``NODE`` across root ports, ``HOSTBRIDGE``, ``MULTIPLE``, ``SINGLE``), as the agent's
fake NVML in the tests answers them.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import combinations
from typing import Any

from cortex.cpuset import format_cpuset, parse_cpuset
from cortex.rules.mig_slots import A100_80GB, MigGeometry, first_start

VENDOR_NVIDIA = "10de"
NVLINK_KINDS = ("none", "nvswitch", "full", "bridges", "mesh")


#: NVML's GPU instance profile ids (``NVML_GPU_INSTANCE_PROFILE_*``) by profile name.
MIG_PROFILE_IDS = {"1g.10gb": 0, "2g.20gb": 1, "3g.40gb": 2, "4g.40gb": 3, "7g.80gb": 4,
                   "1g.20gb": 9}
#: Framebuffer of one memory slice of an 80 GB GPU, MiB (a 3g.40gb reports 40,192).
MIG_SLICE_MB = 10048


def mig_trait(profile: str) -> str:
    """The Placement trait an operator puts on a MIG instance's vGPU provider.

    ``3g.40gb`` -> ``CUSTOM_NVIDIA_3G_40GB``, the form Cortex's request parser reads back
    as the profile (:mod:`cortex.request.devices`). Nova sets no MIG trait itself: the
    operator tags each provider (``openstack resource provider trait set``) and flavors
    ask for it (``trait:CUSTOM_NVIDIA_3G_40GB=required``).
    """
    return "CUSTOM_NVIDIA_" + profile.upper().replace(".", "_")


def mig_layouts(board: Mapping[str, Any], geometry: MigGeometry = A100_80GB
                ) -> list[list[tuple[str, int, int]]]:
    """Per GPU of a MIG board, its GPU instances ``(profile, start, size)`` by start.

    The board's ``mig.layouts`` (one list of profile names per GPU, cycled when shorter
    than the GPUs) placed as the operator's ``nvidia-smi mig -cgi`` would leave them:
    largest profile first, each at its lowest allowed free start
    (:func:`cortex.rules.mig_slots.first_start`), slices in memory slices of
    ``geometry`` (A100/H100 80 GB). Empty for a board without ``mig``. ValueError for
    an unknown profile or a layout that does not fit on one GPU.
    """
    layouts = (board.get("mig") or {}).get("layouts") or []
    if not layouts:
        return []
    placed: list[list[tuple[str, int, int]]] = []
    for layout in layouts:
        slots: list[tuple[int, int]] = []
        instances = []
        for name in sorted(layout, key=lambda n: (-_profile(geometry, n).size,
                                                  -_profile(geometry, n).compute_slices, n)):
            start = first_start(geometry, name, slots)
            if start is None:
                raise ValueError(f"MIG layout {', '.join(layout)} does not fit on one GPU "
                                 f"({name} finds no free start)")
            size = geometry.profile(name).size
            slots.append((start, size))
            instances.append((name, start, size))
        placed.append(sorted(instances, key=lambda i: i[1]))
    count = len(gpu_list(board))
    return [placed[i % len(placed)] for i in range(count)]


def _profile(geometry: MigGeometry, name: str) -> Any:
    """The geometry's profile ``name``; ValueError naming the known ones."""
    try:
        return geometry.profile(name)
    except KeyError as exc:
        raise ValueError(exc.args[0]) from None


def cpu_layout(board: Mapping[str, Any]) -> dict[int, tuple[int, int, int]]:
    """``{cpu: (socket, node, core)}`` with Linux's numbering."""
    sockets, cores = board["sockets"], board["cores_per_socket"]
    threads, per_socket = board.get("threads_per_core", 2), board.get("nodes_per_socket", 1)
    layout = {}
    for t in range(threads):
        for s in range(sockets):
            for c in range(cores):
                cpu = t * sockets * cores + s * cores + c
                layout[cpu] = (s, s * per_socket + c * per_socket // cores, c)
    return layout


def node_count(board: Mapping[str, Any]) -> int:
    """NUMA nodes of the board."""
    return board["sockets"] * board.get("nodes_per_socket", 1)


def default_dedicated(board: Mapping[str, Any]) -> frozenset[int]:
    """Every CPU but the first core (all its threads) of each socket, kept for the host."""
    return frozenset(cpu for cpu, (_, _, core) in cpu_layout(board).items() if core != 0)


def gpu_list(board: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The board's GPUs as ``{"pci", "node", "pcie"}``, generated from ``gpu_count`` if needed."""
    if board.get("gpus"):
        return [dict(g) for g in board["gpus"]]
    count, nodes = board.get("gpu_count", 0), node_count(board)
    return [{"pci": f"0000:{16 * (i + 1):02x}:00.0", "node": i * nodes // count,
             "pcie": [f"rp{i}"]} for i in range(count)]


def nvlink_pairs(board: Mapping[str, Any], count: int) -> dict[frozenset[int], int]:
    """``{frozenset({i, j}): active links}`` of the board's NVLink."""
    nvlink = board.get("nvlink") or {"kind": "none"}
    kind, links = nvlink.get("kind", "none"), nvlink.get("links", 12)
    if kind in ("nvswitch", "full"):
        return {frozenset(p): links for p in combinations(range(count), 2)}
    if kind == "bridges":
        return {frozenset(p): links for p in nvlink.get("pairs", ())}
    if kind == "mesh":
        half = count // 2
        pairs = [p for p in combinations(range(count), 2)
                 if (p[0] < half) == (p[1] < half) or p[1] - p[0] == half]
        return {frozenset(p): links for p in pairs}
    return {}


def pcie_level(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    """NVML's common-ancestor level of two GPUs from their NUMA nodes and PCIe paths."""
    pa, pb = a["pcie"], b["pcie"]
    if a["node"] != b["node"]:
        return "SYSTEM"
    if pa[0] != pb[0]:
        return "NODE"
    if len(pa) == 1 or len(pb) == 1 or pa[1] != pb[1]:
        return "HOSTBRIDGE"
    return "SINGLE" if pa == pb else "MULTIPLE"


def board_report(board: Mapping[str, Any]) -> dict[str, Any]:
    """The TopologyReport cortex-agent would post for a free server of this board."""
    layout = cpu_layout(board)
    dedicated = parse_cpuset(board["dedicated_cpus"]) if "dedicated_cpus" in board \
        else default_dedicated(board)
    shared = parse_cpuset(board.get("shared_cpus"))
    cells = []
    for node in range(node_count(board)):
        cpus = sorted(c for c, (_, n, _) in layout.items() if n == node)
        cores: dict[tuple[int, int], list[int]] = {}
        for cpu in cpus:
            socket, _, core = layout[cpu]
            cores.setdefault((socket, core), []).append(cpu)
        memory = board["memory_mb_per_node"]
        cells.append({
            "id": node, "socket": layout[cpus[0]][0] if cpus else None,
            "cpus": format_cpuset(cpus),
            "dedicated_cpus": format_cpuset(set(cpus) & dedicated),
            "shared_cpus": format_cpuset(set(cpus) & shared),
            "siblings": [format_cpuset(s) for s in cores.values()],
            "memory_mb": memory,
            "mempages": [{"size_kb": 4, "total": memory * 256, "used": 0}]})
    return {"numa_cells": cells, "gpus": _gpus(board), "gpu_links": _links(board)}


def _gpus(board: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Report GPUs: free, healthy, passthrough unless the board is a vGPU or MIG host.

    A board whose GPUs are shared any way (``gpu_sharing: any``) reports them as
    passthrough GPUs; the simulated host shows each as it is used (:mod:`.cloud`). A MIG
    board (:func:`mig_layouts`) reports every GPU in MIG mode under the vGPU host driver
    with its instances, free, numbered 1.. by placement start.
    """
    model = board["gpu"]
    vgpu = bool(board.get("vgpu_slots")) and board.get("gpu_sharing", "vgpu") == "vgpu"
    layouts = mig_layouts(board)
    gpus = []
    for i, g in enumerate(gpu_list(board)):
        mig: dict[str, Any] = {"mode": "disabled", "instances": []}
        if layouts:
            mig = {"mode": "enabled", "pending": "enabled", "instances": [
                {"id": n, "profile_id": MIG_PROFILE_IDS.get(name, 0), "profile": name,
                 "placement_start": start, "placement_size": size,
                 "memory_mb": MIG_SLICE_MB * size, "in_use": False}
                for n, (name, start, size) in enumerate(layouts[i], start=1)]}
        gpus.append({
            "pci_address": g["pci"], "vendor_id": model.get("vendor_id", VENDOR_NVIDIA),
            "device_id": model["product_id"], "name": model.get("name"), "index": i,
            "memory_mb": model.get("memory_mb"), "dev_type": "type-PCI",
            "numa_node": g["node"], "pci_numa_node": g["node"], "in_use": False, "mig": mig,
            "virtualization_mode": "host_vgpu" if vgpu or layouts else "none",
            "health": {"healthy": True, "reasons": []}})
    return gpus


def _links(board: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One GpuLink per pair: NVLink count, P2P over NVLink, PCIe level."""
    gpus = gpu_list(board)
    nvlink = nvlink_pairs(board, len(gpus))
    links = []
    for i, j in combinations(range(len(gpus)), 2):
        count = nvlink.get(frozenset((i, j)), 0)
        links.append({"a": gpus[i]["pci"], "b": gpus[j]["pci"], "nvlink": count,
                      "p2p_nvlink": "OK" if count else "NOT_SUPPORTED",
                      "topology": pcie_level(gpus[i], gpus[j])})
    return links


def board_inventories(board: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Placement inventories of the board's compute node (``{RC: {total, allocation_ratio}}``).

    PCPU = dedicated CPUs, VCPU = shared CPUs (with ``cpu_allocation_ratio``), MEMORY_MB =
    all NUMA memory, VGPU = GPUs x ``vgpu_slots`` (max_unit one GPU's slots) on vGPU hosts,
    one VGPU per MIG instance (max_unit 1: each instance is a provider of one vGPU) on
    MIG hosts.
    """
    report = board_report(board)
    pcpus = sum(len(parse_cpuset(c["dedicated_cpus"])) for c in report["numa_cells"])
    vcpus = sum(len(parse_cpuset(c["shared_cpus"])) for c in report["numa_cells"])
    inventories: dict[str, dict[str, Any]] = {
        "MEMORY_MB": {"total": board["memory_mb_per_node"] * node_count(board)}}
    if pcpus:
        inventories["PCPU"] = {"total": pcpus}
    if vcpus:
        inventories["VCPU"] = {"total": vcpus,
                               "allocation_ratio": board.get("cpu_allocation_ratio", 1.0)}
    if board.get("vgpu_slots"):
        slots = board["vgpu_slots"]
        inventories["VGPU"] = {"total": slots * len(gpu_list(board)), "max_unit": slots}
    elif layouts := mig_layouts(board):
        inventories["VGPU"] = {"total": sum(map(len, layouts)), "max_unit": 1}
    return inventories
