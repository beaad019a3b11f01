"""A fake NVML and fake sysfs/procfs trees built from the layouts in tests/fixtures/topology.

``FakeNvml(layout)`` answers the pynvml calls the agent makes the way the real library
does for that machine (same argument shapes, real ``pynvml.NVMLError`` subclasses, real
constants and ctypes types); ``write_tree(root, layout)`` writes the sysfs, procfs and
nova.conf files the agent reads. Run as a module to regenerate the demo fleet's reports:
``python -m tests.topology_fakes etc/cortex/topology``.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pynvml
import yaml

from cortex.agent.report import build_report
from cortex.cpuset import format_cpuset

LAYOUTS = Path(__file__).parent / "fixtures" / "topology"
DEMO_REPORTS = ("hgx-h100-8gpu", "a100-pcie-4gpu-nvlink-pairs", "a100-mig-4gpu", "l40s-4gpu-pcie")
FIXED_TIME = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def layout_names() -> list[str]:
    """Every layout fixture's name."""
    return sorted(p.stem for p in LAYOUTS.glob("*.yaml"))


def load_layout(name: str) -> dict:
    """One layout, GPUs completed with the model's fields and their NVML index."""
    layout = yaml.safe_load((LAYOUTS / f"{name}.yaml").read_text())
    gpus = []
    for gpu in layout["gpus"]:
        merged = {**layout.get("gpu", {}), **gpu}
        merged.setdefault("driver", "nvidia")
        gpus.append(merged)
    layout["gpus"] = gpus
    return layout


def cpu_layout(host: dict) -> dict[int, dict]:
    """``{cpu: {"socket", "node", "core", "siblings"}}`` with Linux's numbering."""
    sockets, cores = host["sockets"], host["cores_per_socket"]
    threads, per_socket = host["threads_per_core"], host["nodes_per_socket"]
    cpus = {}
    for t in range(threads):
        for s in range(sockets):
            for c in range(cores):
                cpu = t * sockets * cores + s * cores + c
                siblings = [u * sockets * cores + s * cores + c for u in range(threads)]
                cpus[cpu] = {"socket": s, "node": s * per_socket + c // (cores // per_socket),
                             "core": c, "siblings": siblings}
    return cpus


def node_cpus(host: dict) -> dict[int, list[int]]:
    """CPU ids per NUMA node (memory-only nodes have none)."""
    nodes: dict[int, list[int]] = {}
    for cpu, info in sorted(cpu_layout(host).items()):
        nodes.setdefault(info["node"], []).append(cpu)
    for extra in host.get("memory_only_nodes", ()):
        nodes[extra["id"]] = []
    return nodes


def _distance(host: dict, a: int, b: int) -> int:
    """NUMA distance: 10 local, ``socket`` inside a socket, ``remote`` across."""
    distances = host.get("distances", {})
    if a == b:
        return distances.get("local", 10)
    per_socket = host["nodes_per_socket"]
    if a // per_socket == b // per_socket and a < host["sockets"] * per_socket \
            and b < host["sockets"] * per_socket:
        return distances.get("socket", 12)
    return distances.get("remote", 21)


# ------------------------------------------------------------------ sysfs / procfs


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def _link(path: Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, path)


def write_tree(root: Path, layout: dict, guests: list[dict] = ()) -> Path:
    """Write the layout's sysfs, procfs and nova.conf under ``root``; return ``root``.

    ``guests``: ``[{"vcpus": ["12", "13-15"], "mems": "0", "anon_mb": {0: 1024},
    "hugetlb_mb": {0: 2048}, "emulator": "5"}]`` written as libvirt cgroup v2 scopes.
    """
    host = layout["host"]
    cpus = cpu_layout(host)
    sys_ = root / "sys"
    _write(sys_ / "devices/system/cpu/online", f"0-{len(cpus) - 1}")
    for cpu, info in cpus.items():
        top = sys_ / f"devices/system/cpu/cpu{cpu}/topology"
        _write(top / "physical_package_id", str(info["socket"]))
        _write(top / "core_id", str(info["core"]))
        _write(top / "thread_siblings_list", format_cpuset(info["siblings"]))
    nodes = node_cpus(host)
    memory = {n: host["memory_mb_per_node"] for n in nodes}
    memory |= {e["id"]: e["memory_mb"] for e in host.get("memory_only_nodes", ())}
    for node, node_cpu_ids in nodes.items():
        base = sys_ / f"devices/system/node/node{node}"
        _write(base / "cpulist", format_cpuset(node_cpu_ids))
        _write(base / "meminfo", f"Node {node} MemTotal:       {memory[node] * 1024} kB\n"
                                 f"Node {node} MemFree:        {memory[node] * 512} kB")
        _write(base / "distance", " ".join(str(_distance(host, node, o)) for o in sorted(nodes)))
        for size, pages in (host.get("hugepages") or {}).items():
            if node_cpu_ids:
                _write(base / f"hugepages/hugepages-{size}kB/nr_hugepages", str(pages))
                _write(base / f"hugepages/hugepages-{size}kB/free_hugepages", str(pages))
    _write_pci(root, layout)
    for name, pci, node in host.get("nics", ()):
        _write(sys_ / f"bus/pci/devices/{pci}/numa_node", str(node))
        _write(sys_ / f"bus/pci/devices/{pci}/vendor", "0x15b3")
        _link(sys_ / f"class/net/{name}/device", f"../../../bus/pci/devices/{pci}")
    _link(sys_ / "class/net/lo/subsystem", "../../../class/net")  # a virtual one, ignored
    if host.get("nova_conf"):
        lines = ["[DEFAULT]", "", "[compute]"]
        lines += [f"{k} = {v}" for k, v in host["nova_conf"].items()]
        _write(root / "etc/nova/nova.conf", "\n".join(lines))
    for number, guest in enumerate(guests):
        _write_guest(root, number, guest)
    arch = host.get("arch", "x86_64")
    _write(root / "proc/sys/kernel/arch", arch)
    if arch == "x86_64":  # the kernel shows vendor and address sizes on x86 only
        _write(root / "proc/cpuinfo", f"processor\t: 0\nvendor_id\t: "
                                      f"{host.get('vendor_id', 'GenuineIntel')}\n"
                                      "address sizes\t: 46 bits physical, 57 bits virtual\n")
    else:
        _write(root / "proc/cpuinfo", "processor\t: 0\nCPU implementer\t: 0x41\n")
    return root


def _write_pci(root: Path, layout: dict) -> None:
    """GPU (and NVSwitch) PCI functions; held vfio-pci GPUs get a QEMU holding their group."""
    pci = root / "sys/bus/pci/devices"
    for extra in layout["host"].get("other_pci", ()):
        _write(pci / extra / "vendor", "0x10de")
        _write(pci / extra / "class", "0x068000")
    for group, gpu in enumerate(layout["gpus"], start=30):
        base = pci / gpu["pci"]
        _write(base / "vendor", "0x10de")
        _write(base / "device", f"0x{gpu['device_id']}")
        _write(base / "class", "0x030200")
        _write(base / "numa_node", str(gpu["node"]))
        _write(base / "sriov_totalvfs", str(gpu.get("sriov_vfs", 0)))
        _link(base / "driver", f"../../../bus/pci/drivers/{gpu['driver']}")
        _link(base / "iommu_group", f"../../../kernel/iommu_groups/{group}")
        if gpu.get("held"):
            _write(root / f"proc/{4000 + group}/comm", "qemu-kvm")
            _write(root / f"proc/{4000 + group}/cmdline",
                   f"/usr/bin/qemu-system-x86_64\0-name\0guest=instance-{group}\0-uuid\0"
                   f"{uuid.UUID(int=group)}\0-nodefaults\0")
            _link(root / f"proc/{4000 + group}/fd/17", f"/dev/vfio/{group}")
        for number, (mdev_type, held) in enumerate(gpu.get("mdevs", ())):
            mdev = base / f"virtfn{number}" / f"{uuid.UUID(int=number + 1)}"
            _write(mdev / "mdev_type/name", mdev_type)
            _link(mdev / "iommu_group", f"../../../kernel/iommu_groups/{300 + number}")
            if held:
                _link(root / f"proc/{5000 + number}/fd/20", f"/dev/vfio/{300 + number}")


def _write_guest(root: Path, number: int, guest: dict) -> None:
    """One libvirt guest's cgroup v2 scope."""
    scope = root / f"sys/fs/cgroup/machine.slice/machine-qemu\\x2d{number + 1}\\x2dinstance.scope"
    for vcpu, cpus in enumerate(guest.get("vcpus", ())):
        _write(scope / f"libvirt/vcpu{vcpu}/cpuset.cpus", cpus)
    if guest.get("emulator"):
        _write(scope / "libvirt/emulator/cpuset.cpus", guest["emulator"])
    _write(scope / "libvirt/cpuset.mems", guest.get("mems", ""))
    anon = " ".join(f"N{n}={mib * 1024 * 1024}" for n, mib in guest.get("anon_mb", {}).items())
    _write(scope / "memory.numa_stat", f"anon {anon}\nfile N0=4096")
    if guest.get("hugetlb_mb"):
        per_node = " ".join(f"N{n}={mib * 1024 * 1024}" for n, mib in guest["hugetlb_mb"].items())
        _write(scope / "hugetlb.1GB.numa_stat", f"total=0 {per_node}")


# ------------------------------------------------------------------ NVML


class FakeNvml:
    """The pynvml functions the agent calls, answering from a layout.

    ``init_error``: an NVML error code ``nvmlInit`` raises (no driver, no library).
    Everything not implemented here is absent, like a function an old nvidia-ml-py lacks;
    constants, ctypes types and error classes are the real pynvml's.
    """

    NVMLError = pynvml.NVMLError

    def __init__(self, layout: dict, init_error: int | None = None) -> None:
        self.layout = layout
        self.init_error = init_error
        self.visible = [g for g in layout["gpus"] if g["driver"] == "nvidia"]
        self.calls: list[str] = []
        self.initialised = False

    def __getattr__(self, name: str):
        if name.startswith(("NVML_", "c_nvml")):
            return getattr(pynvml, name)
        raise AttributeError(name)

    # -- helpers
    def _gpu(self, handle) -> dict:
        return self.visible[handle.index]

    def _check(self, name: str, handle) -> None:
        self.calls.append(name)
        gpu = self._gpu(handle)
        if name in gpu.get("unsupported", ()):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if name in gpu.get("no_permission", ()):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)

    # -- system
    def nvmlInit(self):  # noqa: N802 - pynvml's names
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self.initialised = True

    def nvmlShutdown(self):  # noqa: N802
        self.initialised = False

    def nvmlSystemGetDriverVersion(self):  # noqa: N802
        return self.layout["driver_version"]

    def nvmlSystemGetCudaDriverVersion(self):  # noqa: N802
        return self.layout["cuda_driver_version"]

    def nvmlDeviceGetCount(self):  # noqa: N802
        return len(self.visible)

    def nvmlDeviceGetHandleByIndex(self, index):  # noqa: N802
        if index >= len(self.visible):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return SimpleNamespace(index=index)

    # -- one device
    def nvmlDeviceGetUUID(self, handle):  # noqa: N802
        self._check("nvmlDeviceGetUUID", handle)
        return f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, self._gpu(handle)['pci'])}"

    def nvmlDeviceGetName(self, handle):  # noqa: N802
        self._check("nvmlDeviceGetName", handle)
        return self._gpu(handle)["name"]

    def nvmlDeviceGetPciInfo(self, handle):  # noqa: N802
        self._check("nvmlDeviceGetPciInfo", handle)
        return _pci_info(self._gpu(handle)["pci"], self._gpu(handle)["device_id"])

    def nvmlDeviceGetMemoryInfo(self, handle):  # noqa: N802
        self._check("nvmlDeviceGetMemoryInfo", handle)
        return SimpleNamespace(total=self._gpu(handle)["memory_mb"] * 1024 * 1024)

    def nvmlDeviceGetCudaComputeCapability(self, handle):  # noqa: N802
        self._check("nvmlDeviceGetCudaComputeCapability", handle)
        return tuple(self._gpu(handle)["compute_capability"])

    def nvmlDeviceGetVirtualizationMode(self, handle):  # noqa: N802
        self._check("nvmlDeviceGetVirtualizationMode", handle)
        return self._gpu(handle).get("virtualization", 0)

    def nvmlDeviceGetNumaNodeId(self, handle):  # noqa: N802
        self._check("nvmlDeviceGetNumaNodeId", handle)
        if "own_numa_node" not in self._gpu(handle):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self._gpu(handle)["own_numa_node"]

    def nvmlDeviceGetMemoryAffinity(self, handle, words, scope):  # noqa: N802
        self._check("nvmlDeviceGetMemoryAffinity", handle)
        assert scope == pynvml.NVML_AFFINITY_SCOPE_NODE
        return _mask([self._gpu(handle)["node"]], words)

    def nvmlDeviceGetCpuAffinityWithinScope(self, handle, words, scope):  # noqa: N802
        self._check("nvmlDeviceGetCpuAffinityWithinScope", handle)
        return _mask(node_cpus(self.layout["host"])[self._gpu(handle)["node"]], words)

    def nvmlDeviceGetMigMode(self, handle):  # noqa: N802
        self._check("nvmlDeviceGetMigMode", handle)
        mode = 1 if self._gpu(handle).get("mig") else 0
        return [mode, mode]

    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle, profile, version=2):  # noqa: N802
        self._check("nvmlDeviceGetGpuInstanceProfileInfo", handle)
        row = self.layout.get("mig_profiles", {}).get(profile)
        if row is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        name, slices, memory, count = row
        return SimpleNamespace(id=profile, sliceCount=slices, memorySizeMB=memory,
                               instanceCount=count, name=f"MIG {name}".encode())

    def nvmlDeviceGetGpuInstances(self, handle, profile_id, buffer, count_ref):  # noqa: N802
        self._check("nvmlDeviceGetGpuInstances", handle)
        found = [m for m in self._gpu(handle).get("mig", ()) if m[1] == profile_id]
        for slot, (gi_id, _, _, _) in enumerate(found):
            token = (handle.index + 1) * 1000 + gi_id
            buffer[slot] = ctypes.cast(token, pynvml.c_nvmlGpuInstance_t)
        count_ref.contents.value = len(found)
        return pynvml.NVML_SUCCESS

    def nvmlGpuInstanceGetInfo(self, instance):  # noqa: N802
        token = ctypes.cast(instance, ctypes.c_void_p).value
        gpu = self.visible[token // 1000 - 1]
        gi_id, profile, start, size = next(m for m in gpu["mig"] if m[0] == token % 1000)
        return SimpleNamespace(id=gi_id, profileId=profile,
                               placement=SimpleNamespace(start=start, size=size))

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle):  # noqa: N802
        self._check("nvmlDeviceGetRetiredPagesPendingStatus", handle)
        return int(self._gpu(handle).get("health", {}).get("retired_pages_pending", False))

    def nvmlDeviceGetRemappedRows(self, handle):  # noqa: N802
        self._check("nvmlDeviceGetRemappedRows", handle)
        health = self._gpu(handle).get("health", {})
        return (0, 0, int(health.get("remap_pending", False)), int(health.get("remap_failed",
                                                                                False)))

    def nvmlDeviceGetTotalEccErrors(self, handle, error_type, counter):  # noqa: N802
        self._check("nvmlDeviceGetTotalEccErrors", handle)
        return self._gpu(handle).get("health", {}).get("uncorrected_ecc", 0)

    def nvmlDeviceGetGpuFabricInfo(self, handle, pointer):  # noqa: N802
        self._check("nvmlDeviceGetGpuFabricInfo", handle)
        fabric = self._gpu(handle).get("fabric")
        if fabric is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        info = pointer.contents
        info.state, info.status, info.cliqueId = 3, 0, fabric["clique_id"]
        ctypes.memmove(info.clusterUuid, uuid.UUID(fabric["cluster_uuid"]).bytes, 16)
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetPowerUsage(self, handle):  # noqa: N802
        self._check("nvmlDeviceGetPowerUsage", handle)
        if "power_mw" not in self._gpu(handle):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self._gpu(handle)["power_mw"]  # an unsigned int of milliwatts, as NVML's

    # -- NVLink and pairs
    def _links(self, handle) -> list[tuple[str, str]]:
        """``[(remote kind, remote pci)]`` per NVLink of a GPU."""
        nvlink = self.layout.get("nvlink") or {}
        index = self.layout["gpus"].index(self._gpu(handle))
        if "switch_links" in nvlink:
            switches = nvlink["switches"]
            return [("switch", switches[link % len(switches)])
                    for link in range(nvlink["switch_links"])]
        for pair in nvlink.get("bridges", ()):
            if index in pair:
                peer = self.layout["gpus"][pair[1] if pair[0] == index else pair[0]]
                return [("gpu", peer["pci"])] * nvlink["links"]
        return []

    def nvmlDeviceGetNvLinkState(self, handle, link):  # noqa: N802
        links = self._links(handle)
        if link >= len(links):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED if not links
                                   else pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return 1

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle, link):  # noqa: N802
        kind = self._links(handle)[link][0]
        return pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH if kind == "switch" \
            else pynvml.NVML_NVLINK_DEVICE_TYPE_GPU

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle, link):  # noqa: N802
        return _pci_info(self._links(handle)[link][1], "0000")

    def nvmlDeviceGetP2PStatus(self, a, b, caps):  # noqa: N802
        assert caps == pynvml.NVML_P2P_CAPS_INDEX_NVLINK
        kinds_a, peers_a = {k for k, _ in self._links(a)}, {p for _, p in self._links(a)}
        if ("switch" in kinds_a and self._links(b)) or self._gpu(b)["pci"] in peers_a:
            return pynvml.NVML_P2P_STATUS_OK
        return pynvml.NVML_P2P_STATUS_NOT_SUPPORTED

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):  # noqa: N802
        ga, gb = self._gpu(a), self._gpu(b)
        pa, pb = ga["pcie"], gb["pcie"]
        if ga["node"] != gb["node"]:
            return pynvml.NVML_TOPOLOGY_SYSTEM
        if pa[0] != pb[0]:
            return pynvml.NVML_TOPOLOGY_NODE
        if len(pa) == 1 or pa[1] != pb[1]:
            return pynvml.NVML_TOPOLOGY_HOSTBRIDGE
        return pynvml.NVML_TOPOLOGY_SINGLE if pa == pb else pynvml.NVML_TOPOLOGY_MULTIPLE


def _pci_info(address: str, device_id: str) -> SimpleNamespace:
    """NVML's PCI info struct: ``busId`` as bytes in NVML's 8-digit-domain upper-case form."""
    domain, rest = address.split(":", 1)
    return SimpleNamespace(busId=f"{int(domain, 16):08X}:{rest.upper()}".encode(),
                           pciDeviceId=(int(device_id, 16) << 16) | 0x10DE)


def _mask(ids, words: int) -> list[int]:
    """A little-endian array of 64-bit words with ``ids`` set."""
    mask = [0] * words
    for i in ids:
        mask[i // 64] |= 1 << (i % 64)
    return mask


# ------------------------------------------------------------------ reports


def agent_report(name: str, root: Path, host: str | None = None, guests: list[dict] = (),
                 **layout_changes) -> dict:
    """The agent's report for a layout, run on a fake tree under ``root`` and a FakeNvml."""
    layout = load_layout(name)
    layout.update(layout_changes)
    write_tree(root, layout, guests)
    nova_conf = root / "etc/nova/nova.conf"
    return build_report(host or name, nvml=FakeNvml(layout), sysfs_root=root,
                        proc_root=root / "proc", nova_config=nova_conf, now=FIXED_TIME)


def main(target: str) -> None:
    """Write the demo fleet's reports (``DEMO_REPORTS``) into ``target``."""
    import tempfile

    for name in DEMO_REPORTS:
        with tempfile.TemporaryDirectory() as tmp:
            report = agent_report(name, Path(tmp))
        report.pop("host")
        Path(target, f"{name}.json").write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {target}/{name}.json")


if __name__ == "__main__":
    main(sys.argv[1])


# ------------------------------------------------------------------ compact topologies


def cell(id, socket=0, cores=4, smt=True, mode="legacy", memory=16384, pinned="",
         cpu_usage=0, memory_usage=0, pages=None):
    """A report cell of ``cores`` cores (SMT pairs ``2i, 2i+1`` from ``id * 2 * cores``).

    ``mode``: ``legacy`` (Nova's default, no CPU sets: every CPU both shared and
    dedicated), ``dedicated`` (every CPU in cpu_dedicated_set), ``shared`` (every CPU in
    cpu_shared_set), ``split`` (first core shared, the rest dedicated).
    ``pages``: ``{size_kb: (total, used)}`` huge pages.
    """
    width = 2 if smt else 1
    first = id * width * cores
    cpus = list(range(first, first + width * cores))
    siblings = [cpus[i:i + width] for i in range(0, len(cpus), width)]
    dedicated = {"dedicated": cpus, "shared": [], "legacy": cpus, "split": cpus[width:]}[mode]
    shared = {"dedicated": [], "shared": cpus, "legacy": cpus, "split": cpus[:width]}[mode]
    huge = sorted((pages or {}).items())
    huge_kb = sum(size * total for size, (total, _) in huge)
    return {"id": id, "socket": socket, "cpus": format_cpuset(cpus),
            "dedicated_cpus": format_cpuset(dedicated), "shared_cpus": format_cpuset(shared),
            "siblings": [format_cpuset(s) for s in siblings], "memory_mb": memory,
            "memory_usage_mb": memory_usage, "cpu_usage": cpu_usage, "pinned_cpus": pinned,
            "mempages": [{"size_kb": 4, "total": (memory * 1024 - huge_kb) // 4, "used": 0}]
            + [{"size_kb": size, "total": total, "used": used}
               for size, (total, used) in huge]}


def gpu(address, node, product="2330", in_use=False, dev_type="type-PCI", healthy=True,
        mig=None, virtualization=None):
    """A report GPU (vendor 10de); ``mig``: ``[(profile, in use)]`` turns MIG on."""
    instances = [{"id": i + 1, "profile_id": 0, "profile": p, "in_use": used}
                 for i, (p, used) in enumerate(mig or ())]
    return {"pci_address": address, "vendor_id": "10de", "device_id": product,
            "dev_type": dev_type, "numa_node": node, "pci_numa_node": node,
            "in_use": in_use, "in_use_source": "agent",
            "mig": {"mode": "enabled" if mig else "disabled", "instances": instances},
            "virtualization_mode": virtualization or ("host_vgpu" if mig else "none"),
            "health": {"healthy": healthy,
                       "reasons": [] if healthy else ["retired pages pending"]}}


def make_topology(cells, gpus=()):
    """The HostTopology of a compact report."""
    from cortex.knowledge.topology import topology_from_report

    return topology_from_report({"numa_cells": list(cells), "gpus": list(gpus),
                                 "gpu_links": []})
