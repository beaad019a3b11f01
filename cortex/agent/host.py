"""Host facts from sysfs and procfs: NUMA cells, CPUs, memory, huge pages, NICs, guests' usage.

Every path is read under a root (``sysfs_root``, default ``/``; ``proc_root``, default
``/proc``) so tests run on a generated tree. What Nova calls a host NUMA cell
(``nova/objects/numa.py NUMACell``) is built the way the libvirt driver builds it:
``pcpuset`` and ``cpuset`` come from ``[compute] cpu_dedicated_set`` /
``cpu_shared_set`` (legacy: both are ``vcpu_pin_set`` or every online CPU), the cell's
socket is its CPUs' ``physical_package_id`` when they share one, else unknown.

Guests' usage (limits, by design of what a host can observe):

* Only libvirt/QEMU guests under the cgroup v2 ``machine.slice`` are seen (v1: the
  ``cpuset`` controller's ``machine.slice``); containers and other slices are not.
* A vCPU cgroup whose ``cpuset.cpus`` is one CPU counts that CPU as pinned; a vCPU
  floating inside one cell counts one shared vCPU of that cell (Nova's ``cpu_usage``);
  a vCPU floating over several cells belongs to a guest without NUMA topology and,
  as in Nova, counts in no cell. An emulator thread pinned to one dedicated CPU
  (``hw:emulator_threads_policy=isolate``) counts as pinned. With
  ``hw:cpu_thread_policy=isolate`` Nova also reserves the pinned CPUs' siblings; the
  agent cannot see that reservation.
* Memory used per cell is what the guest has touched (``memory.numa_stat`` anon plus
  ``hugetlb.*.numa_stat``), only for guests whose ``cpuset.mems`` is a strict subset of
  the host's nodes; a guest that has not touched its memory yet counts less than its
  flavor. Huge pages are exact: they come from the kernel's ``free_hugepages``.
* Nova counts small (4 KiB) page usage only for guests that asked for small pages
  explicitly; the agent cannot tell those apart, so 4 KiB pages report ``used: 0`` and
  the usage shows in ``memory_usage_mb``.
"""

from __future__ import annotations

import configparser
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cortex.cpuset import format_cpuset, parse_cpuset

_PCI_ADDRESS = re.compile(r"^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_UUID = re.compile(r"^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$")
_NODE_DIR = re.compile(r"^node(\d+)$")
_HUGEPAGES_DIR = re.compile(r"^hugepages-(\d+)kB$")
_RESERVED_PAGES = re.compile(r"node:(\d+),size:(\d+)([KMG]?)B?,count:(\d+)", re.IGNORECASE)
SMALL_PAGE_KB = 4


@dataclass(frozen=True)
class NovaCpuSets:
    """Nova's CPU options (``[compute] cpu_dedicated_set``, ``cpu_shared_set``, ``vcpu_pin_set``).

    ``None`` means "not configured". ``reserved_huge_pages`` maps ``(node, size_kb)`` to
    a page count (``[DEFAULT] reserved_huge_pages``).
    """

    dedicated: frozenset[int] | None = None
    shared: frozenset[int] | None = None
    vcpu_pin_set: frozenset[int] | None = None
    reserved_huge_pages: Mapping[tuple[int, int], int] | None = None

    def cell_sets(self, cpus: frozenset[int], online: frozenset[int]
                  ) -> tuple[frozenset[int], frozenset[int]]:
        """``(pcpuset, cpuset)`` of a cell with ``cpus``, as Nova's libvirt driver reports them."""
        if self.dedicated is None and self.shared is None:
            legacy = (self.vcpu_pin_set or online) & cpus
            return legacy, legacy
        shared = self.shared if self.shared is not None else (
            frozenset() if self.dedicated is not None else online)
        return (self.dedicated or frozenset()) & cpus, shared & cpus


def read_nova_cpu_sets(path: str | os.PathLike | None) -> NovaCpuSets:
    """Nova's CPU options from ``nova.conf`` at ``path``; all unset when there is no file.

    Raises ValueError for a CPU list Nova itself would reject.
    """
    if not path or not Path(path).is_file():
        return NovaCpuSets()
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.read(path)

    def option(section: str, name: str) -> frozenset[int] | None:
        value = parser.get(section, name, fallback=None)
        return parse_cpuset(value) if value and value.strip() else None

    reserved = {}
    for match in _RESERVED_PAGES.finditer(parser.get("DEFAULT", "reserved_huge_pages",
                                                     fallback="") or ""):
        node, size, unit, count = match.groups()
        factor = {"": 1, "K": 1, "M": 1024, "G": 1024 * 1024}[unit.upper()]
        reserved[(int(node), int(size) * factor)] = int(count)
    return NovaCpuSets(option("compute", "cpu_dedicated_set"), option("compute", "cpu_shared_set"),
                       option("DEFAULT", "vcpu_pin_set"), reserved)


class Sysfs:
    """Reads files under a root; missing or unreadable files read as None."""

    def __init__(self, root: str | os.PathLike = "/") -> None:
        self.root = Path(root)

    def path(self, relative: str) -> Path:
        """``relative`` (``sys/...``) under the root."""
        return self.root / relative.lstrip("/")

    def read(self, relative: str) -> str | None:
        """The stripped text of a file, or None."""
        try:
            return self.path(relative).read_text().strip()
        except OSError:
            return None

    def read_int(self, relative: str, base: int = 10) -> int | None:
        """A file holding one integer (``0x10de`` with ``base=16``), or None."""
        text = self.read(relative)
        try:
            return int(text, base) if text is not None else None
        except ValueError:
            return None

    def link_name(self, relative: str) -> str | None:
        """The last component of the symlink's target (a driver, an IOMMU group), or None."""
        try:
            return os.path.basename(os.readlink(self.path(relative)))
        except OSError:
            return None

    def listdir(self, relative: str) -> list[str]:
        """Entries of a directory (empty when it does not exist), sorted."""
        try:
            return sorted(os.listdir(self.path(relative)))
        except OSError:
            return []


def online_cpus(fs: Sysfs) -> frozenset[int]:
    """``/sys/devices/system/cpu/online``, else every ``cpuN`` directory."""
    text = fs.read("sys/devices/system/cpu/online")
    if text:
        return parse_cpuset(text)
    return frozenset(int(name[3:]) for name in fs.listdir("sys/devices/system/cpu")
                     if name.startswith("cpu") and name[3:].isdigit())


def cell_cpus(fs: Sysfs) -> dict[int, frozenset[int]]:
    """Online CPUs of each NUMA node (``{0: all online}`` on a kernel without NUMA)."""
    online = online_cpus(fs)
    nodes = sorted(int(m[1]) for m in map(_NODE_DIR.match, fs.listdir("sys/devices/system/node"))
                   if m)
    if not nodes:
        return {0: online}
    return {n: parse_cpuset(fs.read(f"sys/devices/system/node/node{n}/cpulist") or "") & online
            for n in nodes}


def numa_cells(fs: Sysfs, nova: NovaCpuSets, usage: GuestUsage | None = None) -> list[dict]:
    """Every NUMA node as a report cell (see ``NumaCellReport`` in the OpenAPI document).

    A kernel without NUMA (no ``node*`` directories) is one cell 0 holding every CPU
    and ``MemTotal`` of ``/proc/meminfo`` (read from ``sysfs_root``'s ``proc/meminfo``).
    """
    online = online_cpus(fs)
    nodes = sorted(int(m[1]) for m in map(_NODE_DIR.match, fs.listdir("sys/devices/system/node"))
                   if m)
    usage = usage or GuestUsage()
    if not nodes:
        memory_kb = _meminfo_total(fs.read("proc/meminfo") or "")
        return [_cell(fs, 0, online, online, memory_kb, [], [10], nova, usage)]
    cells = []
    for node in nodes:
        base = f"sys/devices/system/node/node{node}"
        cpus = parse_cpuset(fs.read(f"{base}/cpulist") or "") & online
        memory_kb = _meminfo_total(fs.read(f"{base}/meminfo") or "")
        distances = [int(d) for d in (fs.read(f"{base}/distance") or "").split()]
        cells.append(_cell(fs, node, cpus, online, memory_kb, _hugepages(fs, base), distances,
                           nova, usage))
    return cells


def _cell(fs: Sysfs, node: int, cpus: frozenset[int], online: frozenset[int], memory_kb: int,
          hugepages: list[tuple[int, int, int]], distances: list[int], nova: NovaCpuSets,
          usage: GuestUsage) -> dict:
    """One report cell: CPUs, sets, siblings, socket, memory, pages, usage."""
    pcpus, shared = nova.cell_sets(cpus, online)
    packages = {fs.read_int(f"sys/devices/system/cpu/cpu{c}/topology/physical_package_id")
                for c in cpus}
    siblings = {parse_cpuset(fs.read(f"sys/devices/system/cpu/cpu{c}/topology/"
                                     "thread_siblings_list") or str(c)) & cpus for c in cpus}
    reserved = nova.reserved_huge_pages or {}
    huge_kb = sum(size * total for size, total, _ in hugepages)
    mempages = [{"size_kb": SMALL_PAGE_KB, "total": max(memory_kb - huge_kb, 0) // SMALL_PAGE_KB,
                 "used": 0, "reserved": reserved.get((node, SMALL_PAGE_KB), 0)}]
    mempages += [{"size_kb": size, "total": total, "used": total - free,
                  "reserved": reserved.get((node, size), 0)} for size, total, free in hugepages]
    return {
        "id": node,
        "socket": packages.pop() if len(packages) == 1 and None not in packages else None,
        "cpus": format_cpuset(cpus),
        "dedicated_cpus": format_cpuset(pcpus),
        "shared_cpus": format_cpuset(shared),
        "siblings": sorted((format_cpuset(s) for s in siblings if s),
                           key=lambda s: min(parse_cpuset(s))),
        "memory_mb": memory_kb // 1024,
        "memory_usage_mb": usage.memory_mb.get(node, 0),
        "cpu_usage": usage.shared_vcpus.get(node, 0),
        "pinned_cpus": format_cpuset(usage.pinned & cpus),
        "mempages": mempages,
        "distances": distances,
    }


def _meminfo_total(text: str) -> int:
    """KiB of ``MemTotal`` in a (node) meminfo file; 0 when absent."""
    for line in text.splitlines():
        if "MemTotal:" in line:
            return int(line.split("MemTotal:")[1].split()[0])
    return 0


def _hugepages(fs: Sysfs, base: str) -> list[tuple[int, int, int]]:
    """``[(size_kb, total, free)]`` of a node's huge page pools, smallest size first."""
    pools = []
    for name in fs.listdir(f"{base}/hugepages"):
        match = _HUGEPAGES_DIR.match(name)
        if match:
            total = fs.read_int(f"{base}/hugepages/{name}/nr_hugepages") or 0
            free = fs.read_int(f"{base}/hugepages/{name}/free_hugepages") or 0
            pools.append((int(match[1]), total, free))
    return sorted(pools)


def nics(fs: Sysfs) -> list[dict]:
    """Network interfaces backed by a PCI function, with its NUMA node (None when unknown)."""
    found = []
    for name in fs.listdir("sys/class/net"):
        try:
            target = os.path.realpath(fs.path(f"sys/class/net/{name}/device"))
        except OSError:
            continue
        address = os.path.basename(target)
        if not _PCI_ADDRESS.match(address):
            continue
        node = fs.read_int(f"sys/class/net/{name}/device/numa_node")
        found.append({"name": name, "pci_address": address,
                      "numa_node": node if node is not None and node >= 0 else None})
    return found


def held_vfio_groups(proc_root: str | os.PathLike) -> dict[str, str | None]:
    """IOMMU groups whose ``/dev/vfio/<group>`` some process keeps open (QEMU does).

    ``{group number: instance uuid or None}``: the uuid is the holder's ``-uuid``
    argument, which libvirt sets to the domain's uuid and Nova's libvirt driver to the
    instance's (None for a holder without one).
    """
    groups: dict[str, str | None] = {}
    proc = Path(proc_root)
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return {}
    for pid in pids:
        try:
            fds = os.listdir(proc / pid / "fd")
        except OSError:
            continue
        held = set()
        for fd in fds:
            try:
                target = os.readlink(proc / pid / "fd" / fd)
            except OSError:
                continue
            if target.startswith("/dev/vfio/") and target[10:].isdigit():
                held.add(target[10:])
        if held:
            holder = _qemu_uuid(proc / pid / "cmdline")
            for group in held:
                groups[group] = groups.get(group) or holder
    return groups


def _qemu_uuid(cmdline: Path) -> str | None:
    """The value after ``-uuid`` in a NUL-separated command line; None if none or unreadable."""
    try:
        words = cmdline.read_bytes().split(b"\0")
    except OSError:
        return None
    for flag, value in zip(words, words[1:], strict=False):
        if flag == b"-uuid" and _UUID.match(value.decode("ascii", "replace")):
            return value.decode("ascii").lower()
    return None


@dataclass
class GuestUsage:
    """Per-cell usage by guests: ``pinned`` CPUs, ``shared_vcpus`` and ``memory_mb`` per node."""

    pinned: frozenset[int] = frozenset()
    shared_vcpus: Mapping[int, int] | None = None
    memory_mb: Mapping[int, int] | None = None
    guests: int = 0

    def __post_init__(self) -> None:
        self.shared_vcpus = dict(self.shared_vcpus or {})
        self.memory_mb = dict(self.memory_mb or {})


def guest_usage(fs: Sysfs, cell_cpus: Mapping[int, frozenset[int]]) -> GuestUsage:
    """Usage of the libvirt guests under ``machine.slice`` (see the module docstring)."""
    pinned: set[int] = set()
    shared: dict[int, int] = {}
    memory: dict[int, int] = {}
    scopes = _guest_scopes(fs)
    for scope in scopes:
        for vcpu in _vcpu_cpusets(fs, scope):
            if len(vcpu) == 1:
                pinned |= vcpu
                continue
            home = [node for node, cpus in cell_cpus.items() if vcpu and vcpu <= cpus]
            if len(home) == 1:
                shared[home[0]] = shared.get(home[0], 0) + 1
        emulator = _cpuset(fs, f"{scope}/libvirt/emulator") or _cpuset(fs, f"{scope}/emulator")
        if emulator and len(emulator) == 1:
            pinned |= emulator
        mems = _mems(fs, scope)
        if mems and mems < frozenset(cell_cpus):
            for node, mib in _numa_memory(fs, scope).items():
                memory[node] = memory.get(node, 0) + mib
    return GuestUsage(frozenset(pinned), shared, memory, len(scopes))


def _guest_scopes(fs: Sysfs) -> list[str]:
    """The guests' cgroup directories (cgroup v2, else the v1 cpuset hierarchy)."""
    for base in ("sys/fs/cgroup/machine.slice", "sys/fs/cgroup/cpuset/machine.slice"):
        scopes = [f"{base}/{name}" for name in fs.listdir(base)
                  if name.endswith(".scope") or name.startswith("machine-qemu")]
        if scopes:
            return scopes
    return []


def _cpuset(fs: Sysfs, directory: str) -> frozenset[int] | None:
    """``cpuset.cpus`` (else ``.effective``) of a cgroup directory, or None."""
    for name in ("cpuset.cpus", "cpuset.cpus.effective"):
        text = fs.read(f"{directory}/{name}")
        if text:
            return parse_cpuset(text)
    return None


def _vcpu_cpusets(fs: Sysfs, scope: str) -> Iterable[frozenset[int]]:
    """The cpuset of every ``vcpuN`` cgroup of a guest (libvirt nests them under ``libvirt/``)."""
    for parent in (f"{scope}/libvirt", scope):
        names = [n for n in fs.listdir(parent) if n.startswith("vcpu") and n[4:].isdigit()]
        if names:
            return [c for c in (_cpuset(fs, f"{parent}/{n}") for n in names) if c]
    return []


def _mems(fs: Sysfs, scope: str) -> frozenset[int] | None:
    """The NUMA nodes a guest's memory is bound to (``cpuset.mems``), or None."""
    for directory in (f"{scope}/libvirt", scope):
        for name in ("cpuset.mems", "cpuset.mems.effective"):
            text = fs.read(f"{directory}/{name}")
            if text:
                return parse_cpuset(text)
    return None


def _numa_memory(fs: Sysfs, scope: str) -> dict[int, int]:
    """MiB per node from ``memory.numa_stat`` (anon) and every ``hugetlb.*.numa_stat``."""
    per_node: dict[int, int] = {}
    texts = [line for line in (fs.read(f"{scope}/memory.numa_stat") or "").splitlines()
             if line.startswith("anon ")]
    for name in fs.listdir(scope):
        if name.startswith("hugetlb.") and name.endswith(".numa_stat"):
            texts += [line.replace("total=", "total ", 1)
                      for line in (fs.read(f"{scope}/{name}") or "").splitlines()]
    for line in texts:
        for field in line.split()[1:]:
            key, _, value = field.partition("=")
            if key.startswith("N") and key[1:].isdigit() and value.isdigit():
                per_node[int(key[1:])] = per_node.get(int(key[1:]), 0) + int(value)
    return {node: value // (1024 * 1024) for node, value in per_node.items()}


#: ``/proc/cpuinfo`` ``vendor_id`` to the vendor name libvirt (and so Nova's ``cpu_info``) uses.
_VENDORS = {"GenuineIntel": "Intel", "AuthenticAMD": "AMD", "HygonGenuine": "Hygon"}
_ADDRESS_BITS = re.compile(r"(\d+)\s+bits physical")


def cpu_info(fs: Sysfs, proc_root: str | os.PathLike, machine: str | None = None
             ) -> dict | None:
    """The host's part of Nova's ``cpu_info`` that the kernel shows, for hosts Nova hides it of.

    ``{"arch", "vendor"?, "topology": {"cells", "sockets", "cores", "threads"},
    "maxphysaddr"?: {"bits"}}``: ``arch`` is ``machine`` (default: the kernel's
    ``sys/kernel/arch`` under ``proc_root``, else the running kernel's),
    ``vendor`` libvirt's name for ``/proc/cpuinfo``'s ``vendor_id`` (left out when it has
    none), the topology counted from sysfs (NUMA nodes, physical packages, cores per
    package, threads per core) and the physical address bits of ``address sizes``.
    libvirt's CPU model and feature names are not the kernel's, so ``model`` and
    ``features`` are left to the hypervisor API (the sync). None when ``cpuinfo`` cannot
    be read.
    """
    proc = Sysfs(proc_root)
    text = proc.read("cpuinfo")
    if text is None:
        return None
    info: dict = {"arch": machine or proc.read("sys/kernel/arch") or os.uname().machine}
    fields = dict(line.split(":", 1) for line in text.splitlines()[:64] if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    vendor = _VENDORS.get(fields.get("vendor_id", ""))
    if vendor:
        info["vendor"] = vendor
    online = online_cpus(fs)
    cores: dict[tuple[int | None, int | None], int] = {}
    for cpu in online:
        base = f"sys/devices/system/cpu/cpu{cpu}/topology"
        key = (fs.read_int(f"{base}/physical_package_id"), fs.read_int(f"{base}/core_id"))
        cores[key] = cores.get(key, 0) + 1
    sockets = len({package for package, _ in cores}) or 1
    info["topology"] = {"cells": len(cell_cpus(fs)) or 1, "sockets": sockets,
                        "cores": max(len(cores) // sockets, 1),
                        "threads": max(cores.values(), default=1)}
    bits = _ADDRESS_BITS.search(fields.get("address sizes", ""))
    if bits:
        info["maxphysaddr"] = {"bits": int(bits[1])}
    return info


def host_ip(path: str | os.PathLike | None) -> str | None:
    """Nova's ``[DEFAULT] my_ip`` from ``nova.conf`` at ``path`` (the ``host_ip`` it reports)."""
    if not path or not Path(path).is_file():
        return None
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.read(path)
    return (parser.get("DEFAULT", "my_ip", fallback="") or "").strip() or None
