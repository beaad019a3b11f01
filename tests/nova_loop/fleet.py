"""The slice of the demo fleet the Nova loop runs, and the agent reports of its GPU hosts.

Plain data and functions, no import of Nova or Cortex: the driver
(``nova_driver.py``, in Nova's interpreter) builds fake-libvirt hosts from it and the
tests (in Cortex's) post cortex-agent reports built from it.

Every host has the CPUs of a scaled-down two-socket machine: two NUMA cells (one per
socket) of 4 cores x 2 threads (cell 0: CPUs 0-7, cell 1: 8-15, siblings 0,1 / 2,3 ...),
16 GiB of memory per cell of which 8 GiB are 1 GiB pages, and the same
``[compute] cpu_dedicated_set`` / ``cpu_shared_set`` (Nova's are process-wide in one
test process): 12 PCPU and 4 shared CPUs a host. What differs is the PCI devices:

- ``cmp-h100-1``, ``cmp-h100-2``: HGX-like, four H100 SXM5 (``10de:2330``), two per NUMA
  node; alias ``h100`` with the ``required`` NUMA policy, as the demo fleet's
  ``gpu-2xh100-pinned`` body;
- ``cmp-a100-1``: two A100 80GB PCIe (``10de:20b5``), one per node; alias ``a100``
  (legacy policy);
- ``cmp-vgpu-1``: two vGPU-capable GPUs (fake libvirt's mdev type ``nvidia-11``), whose
  VGPU inventories Nova reports as child providers, as the demo fleet's A100 MIG hosts;
  no agent report (the agent has no vGPU mdev view);
- ``cmp-gp-1``: no GPU (general purpose).

All five are in the availability zone ``az-1`` (a Nova aggregate), the passthrough GPU
hosts in one aggregate per model, as the demo fleet's.
"""

from __future__ import annotations

import uuid as uuidlib

CPU_DEDICATED_SET = "2-7,10-15"
CPU_SHARED_SET = "0-1,8-9"
CELLS = 2
CORES_PER_CELL = 4
THREADS_PER_CORE = 2
CELL_MEMORY_MB = 16384
CELL_1G_PAGES = 8
ZONE = "az-1"

#: GPU models: alias -> (vendor id, product id, NVML name, memory MiB).
MODELS = {
    "h100": ("10de", "2330", "NVIDIA H100 80GB HBM3", 81559),
    "a100": ("10de", "20b5", "NVIDIA A100 80GB PCIe", 81920),
}

#: Nova's ``[pci] alias`` entries (Cortex's ``[gpu] pci_alias`` takes the same JSON).
ALIASES = (
    {"name": "h100", "vendor_id": "10de", "product_id": "2330", "device_type": "type-PCI",
     "numa_policy": "required"},
    {"name": "a100", "vendor_id": "10de", "product_id": "20b5", "device_type": "type-PCI"},
)

#: host -> GPUs as (model alias, PCI address, NUMA node).
HOSTS: dict[str, tuple[tuple[str, str, int], ...]] = {
    "cmp-h100-1": (("h100", "0000:1b:00.0", 0), ("h100", "0000:43:00.0", 0),
                   ("h100", "0000:9d:00.0", 1), ("h100", "0000:c3:00.0", 1)),
    "cmp-h100-2": (("h100", "0000:1b:00.0", 0), ("h100", "0000:43:00.0", 0),
                   ("h100", "0000:9d:00.0", 1), ("h100", "0000:c3:00.0", 1)),
    "cmp-a100-1": (("a100", "0000:17:00.0", 0), ("a100", "0000:b1:00.0", 1)),
    "cmp-vgpu-1": (),
    "cmp-gp-1": (),
}
#: host -> its vGPU-capable GPUs as (PCI address, NUMA node): fake libvirt's mdev-capable
#: devices (``10de:0ffe``, type ``nvidia-11``, 16 vGPUs each), Placement VGPU children.
VGPUS: dict[str, tuple[tuple[str, int], ...]] = {
    "cmp-vgpu-1": (("0000:81:00.0", 0), ("0000:81:01.0", 1)),
}
VGPU_TYPE = "nvidia-11"
#: The hosts whose agent reports (passthrough GPUs); the vGPU host reports nothing.
GPU_HOSTS = tuple(h for h, gpus in HOSTS.items() if gpus)


def cell_cpus(cell: int) -> list[int]:
    """The CPU ids of NUMA cell ``cell`` (fake libvirt numbers them cell by cell)."""
    per_cell = CORES_PER_CELL * THREADS_PER_CORE
    return list(range(cell * per_cell, (cell + 1) * per_cell))


def cpulist(ids) -> str:
    """``0-3,8`` for CPU ids."""
    ids, parts, run = sorted(set(ids)), [], []
    for cpu in ids:
        if run and cpu != run[-1] + 1:
            parts.append(run)
            run = []
        run.append(cpu)
    if run:
        parts.append(run)
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in parts)


def cpuset(text: str) -> set[int]:
    """The CPU ids of a ``0-3,8`` list."""
    out: set[int] = set()
    for part in filter(None, text.split(",")):
        low, _, high = part.partition("-")
        out.update(range(int(low), int(high or low) + 1))
    return out


def gpu_uuid(host: str, address: str) -> str:
    """A stable NVML-style GPU uuid."""
    return f"GPU-{uuidlib.uuid5(uuidlib.NAMESPACE_DNS, f'{host}/{address}')}"


def report(host: str, usage: dict, healthy: bool = True) -> dict:
    """The report cortex-agent would post for ``host`` with ``usage`` on it.

    ``usage`` is what the driver's ``usage`` command reads from the host: per cell the
    pinned CPUs, shared-CPU usage, memory and page usage (Nova's resource tracker, which
    follows the guests on the fake hypervisor), and the PCI addresses held by guests.
    ``healthy`` False reports every GPU with an XID error (the agent's health check).
    """
    dedicated, shared = cpuset(CPU_DEDICATED_SET), cpuset(CPU_SHARED_SET)
    cells = []
    for cell in range(CELLS):
        cpus = cell_cpus(cell)
        used = usage["cells"][str(cell)]
        pages = {p["size_kb"]: p for p in used["mempages"]}
        cells.append({
            "id": cell, "socket": cell, "cpus": cpulist(cpus),
            "dedicated_cpus": cpulist(dedicated & set(cpus)),
            "shared_cpus": cpulist(shared & set(cpus)),
            "siblings": [cpulist(cpus[i:i + THREADS_PER_CORE])
                         for i in range(0, len(cpus), THREADS_PER_CORE)],
            "memory_mb": CELL_MEMORY_MB, "memory_usage_mb": used["memory_usage"],
            "cpu_usage": used["cpu_usage"], "pinned_cpus": cpulist(used["pinned_cpus"]),
            "mempages": [{"size_kb": size, "total": page["total"], "used": page["used"],
                          "reserved": page.get("reserved", 0)}
                         for size, page in sorted(pages.items())],
            "distances": [10 if other == cell else 21 for other in range(CELLS)],
        })
    gpus = []
    taken = set(usage["pci_in_use"])
    for index, (model, address, node) in enumerate(HOSTS[host]):
        vendor, product, name, memory = MODELS[model]
        gpus.append({
            "index": index, "uuid": gpu_uuid(host, address), "name": name,
            "pci_address": address, "vendor_id": vendor, "device_id": product,
            "memory_mb": memory, "numa_node": node, "pci_numa_node": node,
            "numa_source": "sysfs", "dev_type": "type-PCI", "driver": "vfio-pci",
            "virtualization_mode": "none",
            "health": {"healthy": healthy,
                       "reasons": [] if healthy else ["xid 79: GPU has fallen off the bus"]},
            "in_use": address in taken, "in_use_source": "agent",
        })
    links = [{"a": a["pci_address"], "b": b["pci_address"], "nvlink": 0,
              "p2p_nvlink": "NOT_SUPPORTED",
              "topology": "NODE" if a["numa_node"] == b["numa_node"] else "SYSTEM"}
             for i, a in enumerate(gpus) for b in gpus[i + 1:]]
    return {"agent_version": "nova-loop", "nvml_error": None, "numa_cells": cells,
            "gpus": gpus, "gpu_links": links, "nics": [], "guests": usage.get("guests", 0)}
