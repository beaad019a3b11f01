"""CPU and NUMA node lists in the kernel's and Nova's text form (``0-3,8,^2``).

The kernel writes lists such as ``0-55,112-167`` (``/sys/devices/system/node/node0/cpulist``,
``cpuset.cpus``); Nova's ``[compute] cpu_dedicated_set`` and ``hw:cpu_dedicated_mask`` use
the same syntax plus ``^N`` to exclude (``nova/virt/hardware.py parse_cpu_spec``). This
module is dependency-free so the agent, the request parser and knowledge can all use it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

#: Highest CPU id accepted. Linux's NR_CPUS is at most 8192; the bound keeps a hostile or
#: broken report ("0-4000000000") from making the API allocate gigabytes.
MAX_CPU_ID = 65535


@functools.lru_cache(maxsize=65536)
def parse_cpuset(text: str | None) -> frozenset[int]:
    """The ids named by ``text``: ``"0-3,^2,8"`` -> ``{0, 1, 3, 8}``; ``""``/None -> empty.

    Ranges are inclusive; ``^N`` and ``^N-M`` remove ids. Raises ValueError for anything
    else (a negative id, a reversed range, an id above MAX_CPU_ID, a stray character).
    Cached: the same lists
    (sibling pairs, a model's cells) recur on every host of a fleet.
    """
    included: set[int] = set()
    excluded: set[int] = set()
    for part in (text or "").replace("\n", "").split(","):
        part = part.strip()
        if not part:
            continue
        target = excluded if part.startswith("^") else included
        target.update(_range(part.lstrip("^").strip()))
    return frozenset(included - excluded)


def _range(part: str) -> range:
    """``"4"`` or ``"4-7"`` as a range; ValueError when malformed."""
    low, _, high = part.partition("-")
    if not low.strip().isdigit() or (high and not high.strip().isdigit()):
        raise ValueError(f"invalid CPU list element {part!r}")
    start, end = int(low), int(high) if high else int(low)
    if end < start:
        raise ValueError(f"invalid CPU range {part!r}")
    if end > MAX_CPU_ID:
        raise ValueError(f"CPU id {end} above {MAX_CPU_ID} in {part!r}")
    return range(start, end + 1)


def format_cpuset(ids: Iterable[int]) -> str:
    """The kernel's compact form of ``ids``: ``{0, 1, 2, 3, 8}`` -> ``"0-3,8"``; empty -> ``""``."""
    ordered = sorted(set(ids))
    parts: list[str] = []
    start = previous = None
    for cpu in ordered:
        if previous is not None and cpu == previous + 1:
            previous = cpu
            continue
        if start is not None:
            parts.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = cpu
    if start is not None:
        parts.append(str(start) if start == previous else f"{start}-{previous}")
    return ",".join(parts)


def mask_to_ids(words: Iterable[int], word_bits: int = 64) -> frozenset[int]:
    """Bit positions set in a little-endian array of ``word_bits``-bit words (NVML masks)."""
    ids = set()
    for index, word in enumerate(words):
        word = int(word)
        bit = 0
        while word:
            if word & 1:
                ids.add(index * word_bits + bit)
            word >>= 1
            bit += 1
    return frozenset(ids)
