"""MIG hosts in the simulator: GPUs split on demand, MIG requests placed on slots.

A MIG host has ``gpus_per_host`` MIG-capable GPUs (:data:`cortex.rules.mig_slots.A100_80GB`
by default), none partitioned at start. A request asks ``count`` GPU instances of one
profile on one host; a GPU instance is created where the policy says and destroyed when
the request leaves, so a GPU is re-partitioned as its instances come and go (an operator's
MIG manager creating instances per guest). Policies (:data:`POLICIES`):

* ``slot-aware``: :func:`cortex.rules.mig_slots.choose_gpu`, a partly used GPU before an
  empty one, the GPU and start that keep the largest free region;
* ``slot-first-fit``: :func:`cortex.rules.mig_slots.first_fit_gpu`, the first GPU that
  takes the profile and its lowest start;
* ``whole-gpu``: the same requests without MIG: every instance takes a whole GPU
  (passthrough), on the host with the fewest free GPUs that has enough.

A request of several instances (only whole-GPU profiles in the traces read here) takes
that many whole empty GPUs on one host, on the host with the fewest empty GPUs that has enough
(first-fit: the first such host). :func:`replay` counts accepted and refused requests;
a refused request is dropped. :func:`alibaba_requests` reads Alibaba's pod lists,
:func:`synthetic_requests` draws a seeded stream from them.

For the pipelines' replays (:mod:`cortex.simulator.replay`), where MIG is Nova's
MIG-backed vGPU with instances the operator created beforehand, :func:`pod_profile` maps
a pod to its profile and :func:`demand_layouts` derives a fixed layout from the demand.
"""

from __future__ import annotations

import csv
import heapq
import math
import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cortex.rules.mig_slots import (
    A100_80GB,
    MigGeometry,
    best_start,
    choose_gpu,
    first_fit_gpu,
    profile_for_share,
)
from cortex.simulator.fleet import SimulationError

POLICIES = ("slot-aware", "slot-first-fit", "whole-gpu")


@dataclass(frozen=True, slots=True)
class MigRequest:
    """``count`` GPU instances of ``profile`` on one host from ``start`` to ``end`` (seconds)."""

    name: str
    profile: str
    count: int
    start: float
    end: float


@dataclass
class MigResult:
    """What one replay accepted and refused, in requests, overall and per profile."""

    policy: str
    accepted: int = 0
    refused: int = 0
    accepted_by_profile: Counter = field(default_factory=Counter)
    refused_by_profile: Counter = field(default_factory=Counter)

    @property
    def acceptance(self) -> float:
        """Accepted share of the requests, 0..1 (0 when there were none)."""
        total = self.accepted + self.refused
        return self.accepted / total if total else 0.0


def alibaba_requests(path: str | Path, geometry: MigGeometry = A100_80GB) -> list[MigRequest]:
    """The GPU pods of an Alibaba pod list (``openb_pod_list_*.csv``) as MIG requests.

    A pod with one GPU and ``gpu_milli`` < 1000 asks the smallest profile with that share
    of the GPU's compute (:func:`cortex.rules.mig_slots.profile_for_share`); a pod with
    whole GPUs asks ``num_gpu`` whole-GPU instances. Pods without GPUs are left out.
    Times: ``creation_time`` to ``deletion_time``. SimulationError for a malformed file.
    """
    requests = []
    try:
        with open(path, newline="") as handle:
            for row in csv.DictReader(handle):
                count, milli = int(row["num_gpu"]), int(row["gpu_milli"])
                if count == 0:
                    continue
                profile = pod_profile(count, milli, geometry)
                requests.append(MigRequest(row["name"], profile, count,
                                           float(row["creation_time"]),
                                           float(row["deletion_time"])))
    except (OSError, KeyError, ValueError) as exc:
        raise SimulationError(f"{path}: not an Alibaba pod list ({exc})") from exc
    return sorted(requests, key=lambda r: (r.start, r.name))


def pod_profile(gpus: int, milli: int, geometry: MigGeometry = A100_80GB) -> str:
    """The MIG profile one GPU of an Alibaba pod asks (``num_gpu``, ``gpu_milli``).

    A fractional pod (one GPU, ``gpu_milli`` < 1000): the smallest profile with that
    share of the GPU's compute (:func:`cortex.rules.mig_slots.profile_for_share`;
    460 milli-GPU: 4g.40gb); a pod of whole GPUs: the whole-GPU profile (7g.80gb).
    """
    if gpus == 1 and milli < 1000:
        return profile_for_share(geometry, milli / 1000)
    return _whole_profile(geometry)


def synthetic_requests(mix: Sequence[MigRequest], number: int, gpus: int, load: float,
                       seed: int, mean_life: float = 3600.0,
                       geometry: MigGeometry = A100_80GB) -> list[MigRequest]:
    """``number`` requests drawn with replacement from ``mix`` (profile and count only).

    Poisson arrivals, exponential lives of mean ``mean_life`` seconds, the arrival rate
    set so the offered load, in GPUs asked at MIG size, is ``load`` x ``gpus`` on average.
    The same ``seed`` gives the same stream.
    """
    if not mix or number < 1 or gpus < 1 or load <= 0:
        raise SimulationError("synthetic MIG stream: needs a mix, requests, GPUs and load > 0")
    rng = random.Random(seed)
    shapes = [(r.profile, r.count) for r in mix]
    mean_gpus = sum(geometry.profile(p).compute_slices / geometry.compute_slices * c
                    for p, c in shapes) / len(shapes)
    rate = load * gpus / (mean_gpus * mean_life)
    clock, out = 0.0, []
    for i in range(number):
        clock += rng.expovariate(rate)
        profile, count = rng.choice(shapes)
        out.append(MigRequest(f"mig-{i:05d}", profile, count, clock,
                              clock + rng.expovariate(1 / mean_life)))
    return out


class MigFleet:
    """``hosts`` hosts of ``gpus_per_host`` GPUs each; every GPU's instances as ``(start, size)``.

    GPUs are numbered host by host. ``place`` puts a request by a policy and returns the
    GPU instances taken (``(gpu, start, size)``), or None and changes nothing;
    ``release`` frees what ``place`` returned.
    """

    def __init__(self, hosts: int, gpus_per_host: int, geometry: MigGeometry = A100_80GB):
        if hosts < 1 or gpus_per_host < 1:
            raise SimulationError("a MIG fleet needs at least one host and one GPU a host")
        self.hosts, self.gpus_per_host, self.geometry = hosts, gpus_per_host, geometry
        self.slots: list[list[tuple[int, int]]] = [[] for _ in range(hosts * gpus_per_host)]

    def place(self, request: MigRequest, policy: str) -> list[tuple[int, int, int]] | None:
        """The instances ``request`` takes under ``policy``; None when it does not fit."""
        if policy not in POLICIES:
            raise SimulationError(f"unknown MIG policy {policy!r}; known: {', '.join(POLICIES)}")
        whole = self.geometry.memory_slices
        if policy == "whole-gpu" or request.count > 1:
            gpus = self._empty_gpus_on_one_host(request.count, first=policy == "slot-first-fit")
            if gpus is None:
                return None
            taken = [(gpu, 0, whole) for gpu in gpus]
        else:
            found = self._one_instance(request.profile, first=policy == "slot-first-fit")
            if found is None:
                return None
            taken = [(found[0], found[1], self.geometry.profile(request.profile).size)]
        for gpu, start, size in taken:
            self.slots[gpu].append((start, size))
        return taken

    def release(self, taken: Sequence[tuple[int, int, int]]) -> None:
        """Destroy the instances ``place`` created."""
        for gpu, start, size in taken:
            self.slots[gpu].remove((start, size))

    def _one_instance(self, profile: str, first: bool) -> tuple[int, int] | None:
        # GPUs with the same used slices answer alike: ask the rule once per layout, with
        # the lowest-numbered GPU of each layout standing for it, in GPU order, so ties
        # fall to the lowest GPU as over the whole fleet
        layouts: dict[frozenset, int] = {}
        for gpu, slots in enumerate(self.slots):
            layouts.setdefault(frozenset(slots), gpu)
        stand_ins = sorted(layouts.values())
        choose = first_fit_gpu if first else choose_gpu
        found = choose(self.geometry, profile, [self.slots[g] for g in stand_ins])
        return None if found is None else (stand_ins[found[0]], found[1])

    def _empty_gpus_on_one_host(self, count: int, first: bool) -> list[int] | None:
        best: tuple[int, list[int]] | None = None
        for host in range(self.hosts):
            base = host * self.gpus_per_host
            empty = [g for g in range(base, base + self.gpus_per_host) if not self.slots[g]]
            if len(empty) < count:
                continue
            if first:
                return empty[:count]
            if best is None or len(empty) < best[0]:
                best = (len(empty), empty[:count])
        return None if best is None else best[1]


def replay(requests: Sequence[MigRequest], fleet: MigFleet, policy: str) -> MigResult:
    """Replay ``requests`` (any order; sorted by start) on ``fleet`` under ``policy``.

    A request leaving at or before another's arrival frees its instances first.
    """
    result = MigResult(policy)
    leaving: list[tuple[float, int, list[tuple[int, int, int]]]] = []
    for i, request in enumerate(sorted(requests, key=lambda r: (r.start, r.name))):
        while leaving and leaving[0][0] <= request.start:
            fleet.release(heapq.heappop(leaving)[2])
        taken = fleet.place(request, policy)
        if taken is None:
            result.refused += 1
            result.refused_by_profile[request.profile] += 1
            continue
        result.accepted += 1
        result.accepted_by_profile[request.profile] += 1
        if math.isfinite(request.end):
            heapq.heappush(leaving, (request.end, i, taken))
    return result


def peak_instances(demand: Iterable[tuple[str, float, float | None]]) -> Counter:
    """The most instances of each profile held at once: ``{profile: instances}``.

    ``demand``: ``(profile, arrival, departure)`` per request of one instance, seconds
    (departure None: stays); a departure at the same time as an arrival goes first.
    """
    events = []
    for profile, arrival, departure in demand:
        events.append((arrival, 1, profile))
        if departure is not None:
            events.append((max(arrival, departure), 0, profile))
    held: Counter = Counter()
    peak: Counter = Counter()
    for _, kind, profile in sorted(events):
        held[profile] += 1 if kind else -1
        peak[profile] = max(peak[profile], held[profile])
    return peak


def mean_instances(demand: Iterable[tuple[str, float, float | None]]) -> dict[str, float]:
    """The instances of each profile held on average over the demand's span.

    ``demand`` as for :func:`peak_instances`; the span runs from the first arrival to the
    last event, a request that stays is held to its end. Instance-seconds over seconds.
    """
    found = list(demand)
    if not found:
        return {}
    start = min(a for _, a, _ in found)
    end = max(max(a, d if d is not None else a) for _, a, d in found)
    span = max(end - start, 1e-9)
    held: dict[str, float] = {}
    for profile, arrival, departure in found:
        life = (end if departure is None else max(arrival, departure)) - arrival
        held[profile] = held.get(profile, 0.0) + life / span
    return held


#: How :func:`demand_layouts` weighs the profiles: their peak concurrent instances
#: (:func:`peak_instances`) or their mean (:func:`mean_instances`).
SIZINGS = ("peak", "mean")


def demand_layouts(demand: Iterable[tuple[str, float, float | None]], gpus: int,
                   geometry: MigGeometry = A100_80GB, sizing: str = "peak"
                   ) -> list[list[str]]:
    """An operator's fixed MIG layout for ``gpus`` GPUs from the demand mix: profiles per GPU.

    ``sizing`` (:data:`SIZINGS`) weighs each profile by its peak concurrent instances or
    by its mean; each profile gets its weight in instances (rounded down), scaled down
    alike when their compute slices exceed the GPUs' (at least one instance of every
    profile asked). The instances are packed, one of each profile first, then the rest,
    largest first (memory slices, then compute), each on the first GPU where the profile
    has a free start, at the start that keeps the largest region free
    (:func:`cortex.rules.mig_slots.best_start`; an instance that fits nowhere is left
    out); then each GPU's free slices are filled, GPU by GPU, with the fitting profile
    that has the fewest instances for its weight (ties: the larger), until none fits. Each
    GPU's profiles largest first; GPUs are numbered across the fleet's hosts in order.
    SimulationError without demand or GPUs.
    """
    if sizing not in SIZINGS:
        raise SimulationError(f"unknown MIG layout sizing {sizing!r} (known: "
                              f"{', '.join(SIZINGS)})")
    demand = list(demand)
    peak = peak_instances(demand) if sizing == "peak" else mean_instances(demand)
    if not peak or gpus < 1:
        raise SimulationError("a MIG layout needs demand and at least one GPU")
    compute = {p: geometry.profile(p).compute_slices for p in peak}
    scale = min(1.0, gpus * geometry.compute_slices / sum(peak[p] * compute[p] for p in peak))
    target = {p: max(1, math.floor(peak[p] * scale)) for p in peak}
    slots: list[list[tuple[int, int]]] = [[] for _ in range(gpus)]
    layouts: list[list[str]] = [[] for _ in range(gpus)]
    supply: Counter = Counter()

    def put(gpu: int, profile: str) -> bool:
        start = best_start(geometry, profile, slots[gpu])
        if start is None:
            return False
        slots[gpu].append((start, geometry.profile(profile).size))
        layouts[gpu].append(profile)
        supply[profile] += 1
        return True

    order = sorted(target, key=lambda p: (-geometry.profile(p).size, -compute[p], p))
    for first in (True, False):             # one of each profile, then the rest
        for profile in order:
            for _ in range(1 if first else target[profile] - supply[profile]):
                if not any(put(gpu, profile) for gpu in range(gpus)):
                    break
    for gpu in range(gpus):
        while True:
            fitting = [p for p in order if best_start(geometry, p, slots[gpu]) is not None]
            if not fitting:
                break
            put(gpu, min(fitting, key=lambda p: (supply[p] / peak[p], -compute[p])))
    return [sorted(layout, key=order.index) for layout in layouts]


def _whole_profile(geometry: MigGeometry) -> str:
    return max(geometry.profiles.values(), key=lambda p: (p.size, p.compute_slices)).name
