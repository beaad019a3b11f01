"""MIG slot placement: where on a GPU a MIG profile can start, and which start to take.

A MIG-capable GPU (A100 80GB, H100 80GB) has 8 memory slices and 7 compute slices. A GPU
instance of a profile occupies ``size`` consecutive memory slices from a ``start`` that
the driver allows for that profile (NVML's ``nvmlGpuInstancePlacement_t``, ``start`` and
``size`` in memory slices, listed by ``nvidia-smi mig -lgipp``; the agent reports them as
``placement_start`` / ``placement_size``). An instance cannot be created over slices
another instance holds, so where a small instance sits decides which larger profiles
still fit: a 1g.10gb at slice 0 leaves room for one 3g.40gb (start 4), the same 1g at
slice 3 leaves none.

:func:`placements` lists the starts a profile may take next to the instances in use;
:func:`best_start` takes the one that keeps the largest free region: the largest profile
still creatable afterwards, then the most placements left (:func:`room`; ties: the lowest
start), so a 1g.10gb goes to slice 6 and a 3g.40gb to slice 4, keeping a 4g.40gb's only
start free. :func:`first_start` takes the lowest, as creating instances in order does.
:func:`choose_gpu` picks a GPU of several and a start on it: best-fit, the GPU left with
the fewest free slices that still takes the profile, then the largest free region.
Slices are counted in memory slices throughout; :func:`largest_free_run` counts the
longest run of free slices, whatever may start there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

#: ``(start, size)`` of one instance, in memory slices.
Slot = tuple[int, int]


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One GPU instance profile: name, compute slices, memory slices taken, allowed starts."""

    name: str
    compute_slices: int
    size: int
    starts: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class MigGeometry:
    """A GPU model's MIG layout: memory slices, compute slices and profiles by name."""

    memory_slices: int
    compute_slices: int
    profiles: Mapping[str, MigProfile]

    def profile(self, name: str) -> MigProfile:
        """The profile called ``name``; KeyError naming the known ones when unknown."""
        try:
            return self.profiles[name]
        except KeyError:
            raise KeyError(f"unknown MIG profile {name!r}; known: "
                           f"{', '.join(self.profiles)}") from None


def _geometry(*profiles: MigProfile) -> MigGeometry:
    return MigGeometry(8, 7, {p.name: p for p in profiles})


#: A100 80GB and H100 80GB (the same slice layout): the GPU instance profiles and their
#: placements as ``nvidia-smi mig -lgipp`` lists them. A 1g.10gb may not start at slice 7;
#: only a whole-GPU 7g.80gb uses it, so a GPU split into small instances holds seven.
A100_80GB = _geometry(
    MigProfile("1g.10gb", 1, 1, (0, 1, 2, 3, 4, 5, 6)),
    MigProfile("1g.20gb", 1, 2, (0, 2, 4, 6)),
    MigProfile("2g.20gb", 2, 2, (0, 2, 4)),
    MigProfile("3g.40gb", 3, 4, (0, 4)),
    MigProfile("4g.40gb", 4, 4, (0,)),
    MigProfile("7g.80gb", 7, 8, (0,)),
)
H100_80GB = A100_80GB


def used_slices(slots: Iterable[Slot]) -> frozenset[int]:
    """The memory slices the instances ``(start, size)`` hold."""
    return frozenset(s for start, size in slots for s in range(start, start + size))


def instance_slots(instances: Iterable, in_use_only: bool = False) -> tuple[Slot, ...]:
    """``(start, size)`` of a GPU's reported MIG instances (``MigInstance`` of the topology).

    Every instance holds its slices until destroyed; with ``in_use_only`` only those a
    guest uses, the layout a re-partition (destroying the idle ones) starts from.
    """
    return tuple((i.placement_start, i.placement_size) for i in instances
                 if i.in_use or not in_use_only)


def placements(geometry: MigGeometry, profile: str, slots: Iterable[Slot]) -> tuple[int, ...]:
    """The starts at which ``profile`` can be created next to the instances ``slots``.

    Ascending; empty when none. KeyError for a profile the geometry does not know.
    """
    shape = geometry.profile(profile)
    used = used_slices(slots)
    return tuple(start for start in shape.starts
                 if not any(s in used for s in range(start, start + shape.size)))


def largest_free_run(geometry: MigGeometry, used: Iterable[int]) -> int:
    """The longest run of consecutive free memory slices on a GPU with ``used`` taken."""
    taken = set(used)
    best = run = 0
    for s in range(geometry.memory_slices):
        run = 0 if s in taken else run + 1
        best = max(best, run)
    return best


def room(geometry: MigGeometry, slots: Iterable[Slot]) -> tuple[int, int, int]:
    """What a GPU with the instances ``slots`` can still take, larger is better.

    ``(compute slices, memory slices)`` of the largest profile that can still be created
    (its free region, respecting the allowed starts: four free slices 1-4 take no
    3g.40gb), then the number of ``(profile, start)`` placements still possible.
    """
    slots = tuple(slots)
    largest, count = (0, 0), 0
    for shape in geometry.profiles.values():
        starts = placements(geometry, shape.name, slots)
        if starts:
            largest = max(largest, (shape.compute_slices, shape.size))
            count += len(starts)
    return largest[0], largest[1], count


def best_start(geometry: MigGeometry, profile: str, slots: Iterable[Slot]) -> int | None:
    """The start for ``profile`` that keeps the largest free region; None if none fits.

    Largest by :func:`room` after the placement (the largest profile still creatable,
    then the placements left); ties go to the lowest start. KeyError for an unknown
    profile.
    """
    slots = tuple(slots)
    size = geometry.profile(profile).size
    starts = placements(geometry, profile, slots)
    if not starts:
        return None
    return max(starts, key=lambda start: (room(geometry, slots + ((start, size),)), -start))


def first_start(geometry: MigGeometry, profile: str, slots: Iterable[Slot]) -> int | None:
    """The lowest start at which ``profile`` fits; None if none does."""
    starts = placements(geometry, profile, slots)
    return starts[0] if starts else None


def choose_gpu(geometry: MigGeometry, profile: str,
               gpus: Sequence[Iterable[Slot]]) -> tuple[int, int] | None:
    """Slot-aware ``(GPU index, start)`` for ``profile`` among GPUs with the instances ``gpus``.

    An empty GPU only when no partly used GPU takes the profile (a whole GPU stays whole
    while it can); among the rest, the GPU whose free region after the placement is the
    largest (:func:`room`), then the lowest index; the start is :func:`best_start` on that
    GPU. None when no GPU takes the profile. Preferring the tightest GPU instead (fewest
    free slices left) refused more requests in the MIG replay (``bench/mig_placement.py``):
    it spends the last hole a larger profile could have used.
    """
    size = geometry.profile(profile).size
    best: tuple[tuple, int, int] | None = None
    for index, slots in enumerate(gpus):
        slots = tuple(slots)
        start = best_start(geometry, profile, slots)
        if start is None:
            continue
        after = room(geometry, slots + ((start, size),))
        key = (not slots, tuple(-x for x in after), index)
        if best is None or key < best[0]:
            best = (key, index, start)
    return None if best is None else (best[1], best[2])


def first_fit_gpu(geometry: MigGeometry, profile: str,
                  gpus: Sequence[Iterable[Slot]]) -> tuple[int, int] | None:
    """The first GPU that takes ``profile`` and its lowest start; None when none does."""
    for index, slots in enumerate(gpus):
        start = first_start(geometry, profile, slots)
        if start is not None:
            return index, start
    return None


def profile_for_share(geometry: MigGeometry, share: float) -> str:
    """The smallest profile (by compute slices, then memory) giving ``share`` of a GPU's compute.

    ``share`` in (0, 1]; ValueError outside. Profiles with the same compute slices but
    more memory (1g.20gb) are never chosen: a share says nothing of memory.
    """
    if not 0 < share <= 1:
        raise ValueError(f"GPU share must be in (0, 1], got {share}")
    fitting = [p for p in geometry.profiles.values()
               if p.compute_slices >= share * geometry.compute_slices - 1e-9]
    return min(fitting, key=lambda p: (p.compute_slices, p.size)).name
