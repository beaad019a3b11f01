"""GPU facts: the NVIDIA PCI functions sysfs lists, completed by NVML where the driver owns them.

A GPU bound to ``vfio-pci`` (passthrough) is invisible to NVML, so the device list
comes from sysfs (vendor ``10de``, PCI class ``03xx``) and NVML adds what only it knows:
UUID, name, memory, NUMA affinity, MIG, virtualisation mode, compute capability,
health, power draw, NVLink and the PCIe topology between pairs. Every NVML call tolerates
``NotSupported``/``NoPermission`` (and a function missing from an older nvidia-ml-py):
the field stays null and the call is named in the GPU's ``unsupported`` list.

NUMA node of a GPU (``numa_node``, with ``numa_source``), first that answers:
``nvmlDeviceGetNumaNodeId`` (only where the GPU is itself a NUMA node, e.g. GH200),
NVML's memory affinity with node scope, NVML's CPU affinity with node scope mapped to
the cell holding those CPUs, then sysfs ``numa_node``. ``pci_numa_node`` is always the
sysfs value, which is what libvirt and therefore Nova's PCI tracker see.

Power (``power_watts``, watts as a float): ``nvmlDeviceGetPowerUsage``, which answers
milliwatts for the board and its memory (NVML API reference, "Device Queries": the mean
over one second on Ampere but GA100 and newer, the instantaneous draw on GA100 and
older), read once per report. A GPU bound to ``vfio-pci`` (passed through to a guest)
is invisible to NVML: its draw is null, as it is for a GPU that answers NotSupported.
"""

from __future__ import annotations

import ctypes
import uuid as uuidlib
from collections import Counter
from collections.abc import Mapping
from typing import Any

from cortex.agent.host import Sysfs
from cortex.cpuset import format_cpuset, mask_to_ids

NVIDIA = "10de"
TOPOLOGY_LEVELS = {0: "INTERNAL", 10: "SINGLE", 20: "MULTIPLE", 30: "HOSTBRIDGE", 40: "NODE",
                   50: "SYSTEM"}
VIRTUALIZATION_MODES = {0: "none", 1: "passthrough", 2: "vgpu", 3: "host_vgpu", 4: "host_vsga"}
P2P_STATUS = {0: "OK", 1: "CHIPSET_NOT_SUPPORTED", 2: "GPU_NOT_SUPPORTED",
              3: "IOH_TOPOLOGY_NOT_SUPPORTED", 4: "DISABLED_BY_REGKEY", 5: "NOT_SUPPORTED",
              6: "UNKNOWN"}
_MASK_WORDS = 64  # 64 x 64 bits: CPU and node masks up to 4096 ids


def normalise_bus_id(bus_id: bytes | str) -> str:
    """NVML's ``00000000:3B:00.0`` as sysfs writes it: ``0000:3b:00.0``."""
    text = bus_id.decode() if isinstance(bus_id, bytes) else bus_id
    domain, bus, rest = text.strip().split(":")
    return f"{int(domain, 16):04x}:{bus.lower()}:{rest.lower()}"


def _text(value: Any) -> str | None:
    """NVML strings arrive as bytes or str."""
    if value is None:
        return None
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class NvmlSession:
    """Calls into an NVML module (``pynvml`` or a fake), recording what a GPU cannot answer."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml

    def call(self, unsupported: list[str] | None, name: str, *args: Any) -> Any:
        """``nvml.<name>(*args)``; None (and ``name`` recorded) when it cannot answer."""
        function = getattr(self.nvml, name, None)
        if function is None:
            if unsupported is not None:
                unsupported.append(f"{name}: not in this nvidia-ml-py")
            return None
        try:
            return function(*args)
        except self.nvml.NVMLError as exc:
            if unsupported is not None:
                unsupported.append(f"{name}: {exc}")
            return None


def sysfs_gpus(fs: Sysfs) -> dict[str, dict]:
    """NVIDIA display/3D controllers (class ``03xx``) by PCI address, with their sysfs facts."""
    gpus = {}
    for address in fs.listdir("sys/bus/pci/devices"):
        base = f"sys/bus/pci/devices/{address}"
        vendor = fs.read_int(f"{base}/vendor", 16)
        pci_class = fs.read_int(f"{base}/class", 16)
        if vendor != int(NVIDIA, 16) or pci_class is None or pci_class >> 16 != 0x03:
            continue
        node = fs.read_int(f"{base}/numa_node")
        gpus[address] = {
            "device_id": f"{fs.read_int(f'{base}/device', 16) or 0:04x}",
            "driver": fs.link_name(f"{base}/driver"),
            "iommu_group": fs.link_name(f"{base}/iommu_group"),
            "pci_numa_node": node if node is not None and node >= 0 else None,
            "dev_type": "type-PF" if (fs.read_int(f"{base}/sriov_totalvfs") or 0) > 0
            else "type-PCI",
            "mdevs": _mdevs(fs, base),
        }
    return gpus


def _mdevs(fs: Sysfs, base: str) -> list[tuple[str, str | None]]:
    """``[(iommu group, vGPU type name)]`` of the mediated devices on a GPU and its VFs."""
    functions = [base] + [f"{base}/{n}" for n in fs.listdir(base) if n.startswith("virtfn")]
    found = []
    for function in functions:
        for name in fs.listdir(function):
            if len(name) == 36 and name.count("-") == 4 and \
                    fs.path(f"{function}/{name}/mdev_type").exists():
                found.append((fs.link_name(f"{function}/{name}/iommu_group") or "",
                              fs.read(f"{function}/{name}/mdev_type/name")))
    return found


def collect_nvml(nvml: Any, cells: Mapping[int, frozenset[int]]) -> dict:
    """NVML facts of every GPU the driver owns, and of every pair of them.

    Returns ``{"driver_version", "cuda_driver_version", "error", "gpus": {address: {...}},
    "links": [...]}``; ``error`` says why there are none (no driver, no GPU, no library).
    """
    session = NvmlSession(nvml)
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        return {"error": f"NVML unavailable: {exc}", "gpus": {}, "links": []}
    try:
        driver = _text(session.call(None, "nvmlSystemGetDriverVersion"))
        cuda = session.call(None, "nvmlSystemGetCudaDriverVersion")
        count = session.call(None, "nvmlDeviceGetCount") or 0
        handles = {}
        facts = {}
        for index in range(count):
            handle = session.call(None, "nvmlDeviceGetHandleByIndex", index)
            if handle is None:
                continue
            gpu = _gpu(session, handle, index, cells)
            handles[gpu["pci_address"]] = (handle, gpu.pop("_nvlinks"))
            facts[gpu["pci_address"]] = gpu
        return {"driver_version": driver,
                "cuda_driver_version": f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None,
                "error": None if facts else "NVML reports no GPU",
                "gpus": facts, "links": _links(session, handles)}
    finally:
        session.call(None, "nvmlShutdown")


def _gpu(session: NvmlSession, handle: Any, index: int,
         cells: Mapping[int, frozenset[int]]) -> dict:
    """Everything NVML says about one GPU."""
    unsupported: list[str] = []
    call = session.call
    pci = call(unsupported, "nvmlDeviceGetPciInfo", handle)
    memory = call(unsupported, "nvmlDeviceGetMemoryInfo", handle)
    capability = call(unsupported, "nvmlDeviceGetCudaComputeCapability", handle)
    mode = call(unsupported, "nvmlDeviceGetVirtualizationMode", handle)
    affinity = _cpu_affinity(session, handle, unsupported)
    numa_node, source = _numa_node(session, handle, affinity, cells, unsupported)
    gpu: dict[str, Any] = {
        "index": index,
        "uuid": _text(call(unsupported, "nvmlDeviceGetUUID", handle)),
        "name": _text(call(unsupported, "nvmlDeviceGetName", handle)),
        "pci_address": normalise_bus_id(pci.busId) if pci else f"nvml-index-{index}",
        "vendor_id": f"{pci.pciDeviceId & 0xFFFF:04x}" if pci else NVIDIA,
        "device_id": f"{pci.pciDeviceId >> 16:04x}" if pci else None,
        "memory_mb": int(memory.total) // (1024 * 1024) if memory else None,
        "numa_node": numa_node,
        "numa_source": source,
        "cpu_affinity": format_cpuset(affinity) if affinity else None,
        "mig": _mig(session, handle, unsupported),
        "virtualization_mode": VIRTUALIZATION_MODES.get(mode) if mode is not None else None,
        "compute_capability": f"{capability[0]}.{capability[1]}" if capability else None,
        "health": _health(session, handle, unsupported),
        "fabric": _fabric(session, handle, unsupported),
        "power_watts": _power_watts(session, handle, unsupported),
        "_nvlinks": _nvlinks(session, handle),
    }
    gpu["unsupported"] = unsupported
    return gpu


def _power_watts(session: NvmlSession, handle: Any, unsupported: list[str]) -> float | None:
    """The GPU's power draw in watts (NVML answers milliwatts); None when it cannot say."""
    milliwatts = session.call(unsupported, "nvmlDeviceGetPowerUsage", handle)
    return int(milliwatts) / 1000.0 if milliwatts is not None else None


def _cpu_affinity(session: NvmlSession, handle: Any, unsupported: list[str]) -> frozenset[int]:
    """CPUs close to the GPU: node-scoped affinity, else NVML's ideal CPU affinity."""
    mask = session.call(None, "nvmlDeviceGetCpuAffinityWithinScope", handle, _MASK_WORDS,
                        session.nvml.NVML_AFFINITY_SCOPE_NODE)
    if mask is None:
        mask = session.call(unsupported, "nvmlDeviceGetCpuAffinity", handle, _MASK_WORDS)
    return mask_to_ids(mask) if mask is not None else frozenset()


def _numa_node(session: NvmlSession, handle: Any, affinity: frozenset[int],
               cells: Mapping[int, frozenset[int]], unsupported: list[str]
               ) -> tuple[int | None, str | None]:
    """``(node, source)`` by the rules of the module docstring (sysfs is added by the caller)."""
    own = session.call(None, "nvmlDeviceGetNumaNodeId", handle)
    if own is not None and own >= 0:
        return own, "nvml_numa_node"
    mask = session.call(None, "nvmlDeviceGetMemoryAffinity", handle, _MASK_WORDS,
                        session.nvml.NVML_AFFINITY_SCOPE_NODE)
    nodes = mask_to_ids(mask) if mask is not None else frozenset()
    if len(nodes) == 1:
        return next(iter(nodes)), "nvml_memory_affinity"
    holding = [node for node, cpus in cells.items() if affinity and affinity <= cpus]
    if len(holding) == 1:
        return holding[0], "nvml_cpu_affinity"
    return None, None


def _mig(session: NvmlSession, handle: Any, unsupported: list[str]) -> dict:
    """``{"mode": enabled|disabled|None, "pending": ..., "instances": [...]}`` of a GPU."""
    modes = session.call(unsupported, "nvmlDeviceGetMigMode", handle)
    if modes is None:
        return {"mode": None, "pending": None, "instances": []}
    current, pending = modes
    names = {1: "enabled", 0: "disabled"}
    mig = {"mode": names.get(current), "pending": names.get(pending), "instances": []}
    if current != 1:
        return mig
    nvml = session.nvml
    for profile in range(getattr(nvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", 0)):
        info = session.call(None, "nvmlDeviceGetGpuInstanceProfileInfo", handle, profile)
        if info is None:
            continue
        for instance in _gpu_instances(session, handle, info, unsupported):
            mig["instances"].append({
                "id": instance.id, "profile_id": int(info.id),
                "profile": _profile_name(info),
                "placement_start": instance.placement.start,
                "placement_size": instance.placement.size,
                "memory_mb": int(info.memorySizeMB), "in_use": False})
    mig["instances"].sort(key=lambda i: i["id"])
    return mig


def _gpu_instances(session: NvmlSession, handle: Any, info: Any,
                   unsupported: list[str]) -> list[Any]:
    """GPU instance infos of one profile (``nvmlDeviceGetGpuInstances`` with ctypes buffers)."""
    nvml = session.nvml
    capacity = max(int(info.instanceCount), 1)
    buffer = (nvml.c_nvmlGpuInstance_t * capacity)()
    count = ctypes.c_uint(0)
    if session.call(unsupported, "nvmlDeviceGetGpuInstances", handle, int(info.id), buffer,
                    ctypes.pointer(count)) is None:
        return []
    infos = [session.call(unsupported, "nvmlGpuInstanceGetInfo", buffer[i])
             for i in range(count.value)]
    return [i for i in infos if i is not None]


def _profile_name(info: Any) -> str:
    """``3g.40gb`` from NVML's profile name (``MIG 3g.40gb``), else from slices and memory."""
    name = _text(getattr(info, "name", None))
    if name:
        return name.removeprefix("MIG ").strip()
    return f"{info.sliceCount}g.{-(-int(info.memorySizeMB) // 1024)}gb"


def _health(session: NvmlSession, handle: Any, unsupported: list[str]) -> dict:
    """``{"healthy", "reasons"}`` from retired pages, row remapping and uncorrected ECC errors."""
    nvml = session.nvml
    reasons = []
    pending = session.call(unsupported, "nvmlDeviceGetRetiredPagesPendingStatus", handle)
    if pending == getattr(nvml, "NVML_FEATURE_ENABLED", 1):
        reasons.append("retired pages pending (GPU reset needed)")
    rows = session.call(unsupported, "nvmlDeviceGetRemappedRows", handle)
    if rows and rows[2]:
        reasons.append("row remapping pending (GPU reset needed)")
    if rows and rows[3]:
        reasons.append("row remapping failed")
    ecc = session.call(unsupported, "nvmlDeviceGetTotalEccErrors", handle,
                       nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC)
    if ecc:
        reasons.append(f"{ecc} uncorrected ECC errors since the driver loaded")
    return {"healthy": not reasons, "reasons": reasons}


def _fabric(session: NvmlSession, handle: Any, unsupported: list[str]) -> dict | None:
    """Multi-node NVLink fabric registration: clique id and cluster UUID, when completed."""
    nvml = session.nvml
    struct_type = getattr(nvml, "c_nvmlGpuFabricInfo_t", None)
    if struct_type is None:
        return None
    info = struct_type()
    if session.call(unsupported, "nvmlDeviceGetGpuFabricInfo", handle,
                    ctypes.pointer(info)) is None:
        return None
    if info.state != getattr(nvml, "NVML_GPU_FABRIC_STATE_COMPLETED", 3) or info.status != 0:
        return None
    cluster = bytes(info.clusterUuid)
    return {"clique_id": int(info.cliqueId),
            "cluster_uuid": str(uuidlib.UUID(bytes=cluster)) if any(cluster) else None}


def _nvlinks(session: NvmlSession, handle: Any) -> dict:
    """Active NVLinks of a GPU: ``{"switch": n, "gpus": Counter({peer address: n})}``."""
    nvml = session.nvml
    result: dict[str, Any] = {"switch": 0, "gpus": Counter()}
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 0)):
        state = session.call(None, "nvmlDeviceGetNvLinkState", handle, link)
        if state is None:
            break  # no such link (or no NVLink at all): the links are numbered densely
        if not state:
            continue
        kind = session.call(None, "nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
        if kind == getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2):
            result["switch"] += 1
            continue
        remote = session.call(None, "nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
        if remote is not None:
            result["gpus"][normalise_bus_id(remote.busId)] += 1
    return result


def _links(session: NvmlSession, handles: Mapping[str, tuple[Any, dict]]) -> list[dict]:
    """Every GPU pair: active NVLinks (direct or through NVSwitch), P2P status, PCIe level."""
    nvml = session.nvml
    addresses = sorted(handles)
    links = []
    for i, a in enumerate(addresses):
        for b in addresses[i + 1:]:
            (ha, la), (hb, lb) = handles[a], handles[b]
            status = session.call(None, "nvmlDeviceGetP2PStatus", ha, hb,
                                  nvml.NVML_P2P_CAPS_INDEX_NVLINK)
            level = session.call(None, "nvmlDeviceGetTopologyCommonAncestor", ha, hb)
            count = la["gpus"].get(b, 0)
            if status == 0 and la["switch"] and lb["switch"]:
                count += min(la["switch"], lb["switch"])
            links.append({"a": a, "b": b, "nvlink": count,
                          "p2p_nvlink": P2P_STATUS.get(status) if status is not None else None,
                          "topology": TOPOLOGY_LEVELS.get(level) if level is not None else None})
    return links


def merge_gpus(sysfs_facts: Mapping[str, dict], nvml_facts: Mapping[str, dict],
               held_groups: Mapping[str, str | None]) -> list[dict]:
    """One report entry per GPU (see ``GpuReport`` in the OpenAPI document).

    ``in_use`` (source ``agent``): the GPU is bound to ``vfio-pci`` and a process holds its
    VFIO group open; ``instance_uuid`` the holder's Nova instance (``held_groups``, from
    :func:`cortex.agent.host.held_vfio_groups`), where known. MIG instances in use: one
    per held vGPU whose type names the instance's profile (``A100D-3-40C`` -> ``3g.40gb``),
    lowest instance ids first.
    """
    merged = []
    for address in sorted(set(sysfs_facts) | set(nvml_facts)):
        sys_gpu = sysfs_facts.get(address, {})
        gpu = dict(nvml_facts.get(address) or _nvml_less(address, sys_gpu))
        gpu["device_id"] = gpu.get("device_id") or sys_gpu.get("device_id")
        gpu["dev_type"] = sys_gpu.get("dev_type", "type-PCI")
        gpu["driver"] = sys_gpu.get("driver")
        gpu["pci_numa_node"] = sys_gpu.get("pci_numa_node")
        if gpu["numa_node"] is None and gpu["pci_numa_node"] is not None:
            gpu["numa_node"], gpu["numa_source"] = gpu["pci_numa_node"], "sysfs"
        held = [kind for group, kind in sys_gpu.get("mdevs", ()) if group in held_groups]
        gpu["vgpus_in_use"] = len(held)
        _mark_mig_in_use(gpu["mig"], held)
        gpu["in_use"] = bool(gpu["driver"] == "vfio-pci"
                             and sys_gpu.get("iommu_group") in held_groups)
        gpu["in_use_source"] = "agent"
        if gpu["in_use"] and held_groups.get(sys_gpu.get("iommu_group")):
            gpu["instance_uuid"] = held_groups[sys_gpu["iommu_group"]]
        merged.append(gpu)
    return merged


def _nvml_less(address: str, sys_gpu: Mapping[str, Any]) -> dict:
    """The entry of a GPU NVML does not see (bound to vfio-pci, or no driver)."""
    return {"index": None, "uuid": None, "name": None, "pci_address": address,
            "vendor_id": NVIDIA, "device_id": sys_gpu.get("device_id"), "memory_mb": None,
            "numa_node": None, "numa_source": None, "cpu_affinity": None,
            "mig": {"mode": None, "pending": None, "instances": []},
            "virtualization_mode": None, "compute_capability": None,
            "health": {"healthy": True, "reasons": []}, "fabric": None, "power_watts": None,
            "unsupported": [f"not visible to NVML (driver {sys_gpu.get('driver') or 'none'})"]}


def _mark_mig_in_use(mig: dict, held_types: list[str | None]) -> None:
    """Mark one instance of the matching profile in use per held vGPU of a MIG-backed type."""
    for kind in held_types:
        profile = vgpu_type_profile(kind)
        free = [i for i in mig["instances"] if i["profile"] == profile and not i["in_use"]]
        if free:
            free[0]["in_use"] = True


def vgpu_type_profile(kind: str | None) -> str | None:
    """The MIG profile of a MIG-backed vGPU type: ``GRID A100D-3-40C`` -> ``3g.40gb``."""
    if not kind:
        return None
    tail = kind.split()[-1]
    parts = tail.split("-")
    if len(parts) >= 3 and parts[1].isdigit() and parts[2][:-1].isdigit():
        return f"{parts[1]}g.{parts[2][:-1]}gb"
    return None
