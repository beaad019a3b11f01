"""Fit a guest's NUMA cells onto a host's: the rules of Nova's NUMATopologyFilter.

Nova's ``nova/virt/hardware.py``: ``numa_fit_instance_to_host`` tries every assignment
of guest cells to distinct host cells (``itertools.permutations``) and keeps the first
where every cell fits (``_numa_fit_instance_cell``) and, when asked, the PCI requests
fit the chosen cells. A cell fits when:

* memory: with a page size asked for (KiB, or small -1, large -2, any -3), enough free
  pages of an allowed size the host has (``_numa_cell_supports_pagesize_request``; the
  page pool alone decides, not the cell's memory minus its usage); else, where the cell
  reports pages, on the smallest page size, counting free pages for pinned guests and
  all pages otherwise; only a cell without pages compares MiB: pinned guests against
  ``memory - memory_usage``, others against ``memory`` (no overcommit against the cell
  itself);
* pinned (dedicated/mixed) guests: their pinned CPUs (plus one for isolated emulator
  threads on guest cell 0) fit the cell's dedicated CPUs and its free ones, and the
  thread policy packs (``_pack_instance_onto_cores``): ``require`` needs cores with free
  siblings, ``isolate`` whole free cores (and, on an SMT host configured with
  ``cpu_dedicated_set``, never fits: Nova bug 1889633);
* shared and mixed guests: their shared vCPUs fit the cell's shared CPUs, and usage stays
  within ``cpu_allocation_ratio`` x shared CPUs and ``ram_allocation_ratio`` x memory
  (a mixed guest passes both the pinned and the shared checks).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import permutations
from typing import Any

from cortex.knowledge.topology import HostTopology, NumaCell

MEMPAGES_SMALL, MEMPAGES_LARGE, MEMPAGES_ANY = -1, -2, -3
PINNED = ("dedicated", "mixed")


def cell_refusal(cell: NumaCell, guest: Any, cpu_ratio: float, ram_ratio: float,
                 reserved: int = 0) -> str | None:
    """Why guest cell ``guest`` (a NumaCellRequest) does not fit host ``cell``; None if it does.

    ``reserved`` is the extra pinned CPU of isolated emulator threads (guest cell 0 only).
    """
    reason = _memory_refusal(cell, guest)
    if reason:
        return reason
    pinned = guest.cpu_policy in PINNED
    needed = len(guest.pcpuset) + reserved
    if pinned and needed > len(cell.pcpuset):
        return f"{needed} pinned CPUs > {len(cell.pcpuset)} dedicated CPUs"
    if guest.cpu_policy in (None, "shared", "mixed") and len(guest.cpuset) > len(cell.cpuset):
        return f"{len(guest.cpuset)} shared vCPUs > {len(cell.cpuset)} shared CPUs"
    if pinned:
        if needed > cell.avail_pcpus:
            return f"{needed} pinned CPUs > {cell.avail_pcpus} free dedicated CPUs"
        reason = _packing_refusal(cell, guest, reserved)
        if reason or guest.cpu_policy == "dedicated":
            return reason
    usage = cell.cpu_usage + len(guest.cpuset)
    if usage > len(cell.cpuset) * cpu_ratio:
        return (f"shared vCPUs {usage} > {len(cell.cpuset)} x cpu_allocation_ratio "
                f"{cpu_ratio:g}")
    memory = cell.memory_usage + guest.memory
    if memory > cell.memory * ram_ratio:
        return f"memory {memory} MiB > {cell.memory} MiB x ram_allocation_ratio {ram_ratio:g}"
    return None


def _memory_refusal(cell: NumaCell, guest: Any) -> str | None:
    """The memory part of ``_numa_fit_instance_cell``."""
    memory_kb = guest.memory * 1024
    if guest.pagesize:
        return _pagesize_refusal(cell, guest.pagesize, memory_kb)
    if cell.mempages:
        smallest = cell.mempages[0]
        use_free = guest.cpu_policy in PINNED
        pages = smallest.free if use_free else smallest.total
        if memory_kb > pages * smallest.size_kb or memory_kb % smallest.size_kb:
            kind = "free " if use_free else ""
            return (f"{guest.memory} MiB > {pages * smallest.size_kb // 1024} MiB in "
                    f"{kind}{smallest.size_kb} KiB pages")
        return None
    if guest.cpu_policy in PINNED and guest.memory > cell.avail_memory:
        return f"{guest.memory} MiB > {cell.avail_memory} MiB free for a pinned guest"
    if guest.memory > cell.memory:
        return f"{guest.memory} MiB > {cell.memory} MiB"
    return None


def _pagesize_refusal(cell: NumaCell, pagesize: int, memory_kb: int) -> str | None:
    """``_numa_cell_supports_pagesize_request``: some allowed size holds the memory."""
    sizes = sorted((p.size_kb for p in cell.mempages), reverse=True)
    if pagesize == MEMPAGES_SMALL:
        candidates, label = sizes[-1:], "small pages"
    elif pagesize == MEMPAGES_LARGE:
        candidates, label = sizes[:-1], "large pages"
    elif pagesize == MEMPAGES_ANY:
        candidates, label = sizes, "pages of any size"
    elif pagesize not in sizes:
        return f"no {pagesize} KiB pages"
    else:
        candidates, label = [pagesize], f"{pagesize} KiB pages"
    for size in candidates:
        pages = cell.pages(size)
        if pages is not None and memory_kb <= pages.free * size and memory_kb % size == 0:
            return None
    return f"{memory_kb // 1024} MiB do not fit the free {label}"


def _packing_refusal(cell: NumaCell, guest: Any, reserved: int) -> str | None:
    """``_pack_instance_onto_cores``: can the pinned vCPUs be packed under the thread policy.

    The isolated emulator thread's CPU is taken next to the guest cell's pinned vCPUs
    (``_get_reserved`` returns nothing without them), so a guest cell 0 of a ``mixed``
    guest with no pinned vCPU and ``hw:emulator_threads_policy=isolate`` fits nowhere.
    """
    wanted = len(guest.pcpuset)
    if reserved and not wanted:
        return "isolated emulator threads need a pinned vCPU in guest cell 0"
    threads = cell.threads_per_core
    free_cores = cell.cores_with_free  # [t] = cores with at least t free pinnable CPUs
    policy = guest.cpu_thread_policy
    if policy == "isolate":
        whole = free_cores[threads] if len(free_cores) > threads else 0
        if not whole:
            return "thread policy isolate: no fully free core"
        if threads != 1 and cell.pcpuset != cell.cpuset:
            return ("thread policy isolate on an SMT host with cpu_dedicated_set "
                    "(Nova bug 1889633)")
        if whole < wanted:
            return f"thread policy isolate: {wanted} vCPUs need {wanted} free cores, {whole} free"
        if reserved and cell.avail_pcpus - wanted * threads < reserved:
            return "thread policy isolate: no free CPU left for the emulator threads"
        return None
    if policy == "require":
        if threads <= 1:
            return "thread policy require: the host has no SMT"
        if not any(t * free_cores[t] >= wanted for t in range(threads, 1, -1)):
            return f"thread policy require: no sibling threads for {wanted} vCPUs"
    return None


def fit_cells(topology: HostTopology, guest_cells: Sequence[Any], cpu_ratio: float,
              ram_ratio: float, emulator_isolated: bool = False,
              accept: Callable[[tuple[int, ...]], str | None] | None = None,
              order: Sequence[int] | None = None
              ) -> tuple[tuple[int, ...] | None, str | None]:
    """``(host cell ids, None)`` of the first assignment that fits, else ``(None, reason)``.

    ``accept(ids)`` may refuse an assignment that fits (the PCI check), with a reason.
    ``order``: host cell ids in the order assignments are tried (default: by id; Nova
    since 2023.1 sorts them, see :func:`cortex.rules.device_choice.nova_cell_order`).
    """
    host_cells = topology.cells
    if order is not None:
        by_id = {c.id: c for c in host_cells}
        host_cells = tuple(by_id[i] for i in order)
    if len(host_cells) < len(guest_cells):
        return None, f"{len(guest_cells)} guest NUMA cells > {len(host_cells)} host cells"
    refusals = [[cell_refusal(cell, guest, cpu_ratio, ram_ratio,
                              1 if emulator_isolated and index == 0 else 0)
                 for cell in host_cells] for index, guest in enumerate(guest_cells)]
    for index, row in enumerate(refusals):
        if all(row):
            return None, f"guest cell {index} fits no host cell: " + "; ".join(
                f"cell {cell.id}: {reason}" for cell, reason in zip(host_cells, row,
                                                                     strict=True))
    refused = None
    for assignment in permutations(range(len(host_cells)), len(guest_cells)):
        if any(refusals[g][h] for g, h in enumerate(assignment)):
            continue
        ids = tuple(host_cells[h].id for h in assignment)
        refused = accept(ids) if accept else None
        if refused is None:
            return ids, None
    return None, refused or "no set of distinct host cells fits every guest cell"
