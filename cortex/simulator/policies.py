"""Placement policies of the literature, replayed beside the pipelines: FGD and best-fit.

Both take the hosts that pass the filters of a pipeline (:data:`FILTERS_OF`, Cortex's
GPU pipeline, so every policy judges the same valid hosts) and order them by their own
score instead of the pipeline's weighers; the simulated Nova then claims on the first
hosts of that order, as with any pipeline.

``fgd``: fragmentation gradient descent (Weng et al., "Beware of Fragmentation:
Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC '23).
A host's fragmentation for one kind of task is the free GPU capacity that task could not
use there: all of it when the task does not fit the host at all (CPUs, memory, GPU
model, or GPU capacity), else the free capacity of the GPUs that cannot hold the task
(for a task of whole GPUs the partly used GPUs, for a fraction ``d`` of a GPU the GPUs
with less than ``d`` free). Against a target workload, a distribution of kinds of tasks,
a host's fragmentation is the expectation over it. FGD places a task on the host where
that expectation grows least. Here the target workload is the trace's own GPU requests,
kinds told apart by CPUs, memory, GPUs, vGPUs and GPU models, each weighted by its share
of the requests, as the paper takes its workload's distribution; a host's free CPUs and
memory are Placement's (dedicated CPUs and MiB, the host as a whole, not per NUMA cell).
The paper also picks the GPU a fraction lands on; on OpenStack nova-compute picks it (the
first GPU with room, :func:`cortex.rules.device_choice.vgpu_parent`), so the growth is
computed for that GPU.

``best-fit``: the host with the least left after the placement, the free share of its
GPU capacity plus the free share of its CPUs (one of the paper's baselines).

Ties keep the order the hosts were offered in.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from cortex.pipeline.config import PipelineSet
from cortex.simulator.cloud import SimHost
from cortex.simulator.trace import TraceRequest

#: The policies and the pipeline whose filters they judge after.
POLICIES = ("fgd", "best-fit")
FILTERS_OF = "kvm-gpu-topology-aware"


def with_policies(pipelines: PipelineSet, names: Sequence[str]) -> PipelineSet:
    """``pipelines`` plus a filters-only pipeline for each policy of ``names``.

    Under the policy's name: :data:`FILTERS_OF`'s filters and no weighers (its hosts stay
    in the offered order, for the policy to order).
    """
    wanted = [n for n in names if n in POLICIES]
    if not wanted:
        return pipelines
    base = pipelines.pipelines[FILTERS_OF]
    added = {name: replace(base, name=name, weighers=()) for name in wanted}
    return replace(pipelines, pipelines={**pipelines.pipelines, **added})


@dataclass(frozen=True)
class Workload:
    """The target workload: kinds of GPU tasks and their shares, as arrays over the kinds.

    ``cpus``/``memory``: dedicated CPUs and MiB; ``whole``: GPUs (0 for a fraction);
    ``share``: the fraction of one GPU (1.0 for whole GPUs); ``products``: per kind the
    GPU models it takes (empty: any); ``weight``: its share of the requests (sums to 1).
    """

    cpus: np.ndarray
    memory: np.ndarray
    whole: np.ndarray
    share: np.ndarray
    products: tuple[frozenset[str], ...]
    weight: np.ndarray

    @classmethod
    def of(cls, trace: Sequence[TraceRequest], vgpu_slots: int) -> Workload:
        """The GPU requests of ``trace`` by kind (``vgpu_slots``: vGPUs of one GPU)."""
        kinds = Counter((r.vcpus, r.memory_mb, r.gpus, r.vgpus, frozenset(r.products))
                        for r in trace if r.gpus or r.vgpus)
        if not kinds:
            raise ValueError("the trace has no GPU requests")
        rows = list(kinds)
        slots = max(1, vgpu_slots)
        total = sum(kinds.values())
        return cls(np.array([k[0] for k in rows], float), np.array([k[1] for k in rows], float),
                   np.array([k[2] for k in rows], float),
                   np.array([1.0 if k[2] else k[3] / slots for k in rows]),
                   tuple(k[4] for k in rows),
                   np.array([kinds[k] / total for k in rows]))

    def fragmentation(self, free: np.ndarray, cpus: float, memory: float,
                      product: str) -> float:
        """The expected fragmentation (in GPUs) of a host with ``free`` capacity per GPU.

        ``free``: per GPU its free share (0 to 1); ``cpus``/``memory``: free on the host.
        """
        total = float(free.sum())
        if total <= 0:
            return 0.0
        ordered = np.sort(free)
        below = np.concatenate(([0.0], np.cumsum(ordered)))
        # per kind: free capacity of the GPUs that cannot hold it (partly used GPUs for
        # whole-GPU kinds, GPUs with less free than the fraction for the others)
        limit = np.where(self.whole > 0, 1.0, self.share)
        useless = below[np.searchsorted(ordered, limit - 1e-9, side="left")]
        whole_free = int(np.count_nonzero(free >= 1.0 - 1e-9))
        fits = ((self.cpus <= cpus) & (self.memory <= memory)
                & np.where(self.whole > 0, self.whole <= whole_free,
                           ordered[-1] >= self.share - 1e-9)
                & self._model_fits(product))
        return float(self.weight @ np.where(fits, useless, total))

    def _model_fits(self, product: str) -> np.ndarray:
        cache = self.__dict__.setdefault("_models", {})
        found = cache.get(product)
        if found is None:
            found = cache[product] = np.array([not p or product in p for p in self.products])
        return found


def host_capacity(host: SimHost) -> tuple[np.ndarray, float, float]:
    """``(free share per GPU, free dedicated CPUs, free MiB)`` of a simulated host.

    A GPU passed through is 0 free; a vGPU parent its free vGPUs over its slots; on a
    host of passthrough GPUs only, a free GPU is 1. A host whose GPUs only serve vGPUs
    (a vGPU host) counts its vGPU room the same way.
    """
    slots = host.vgpu_slots
    free = np.array([0.0 if address in host.gpus_in_use
                     else (slots - used) / slots if slots else 1.0
                     for address, used in host.vgpus.items()])
    cpus = (host.inventories["PCPU"].total - host.used["PCPU"]
            if "PCPU" in host.inventories else 0.0)
    memory = host.inventories["MEMORY_MB"].total - host.used["MEMORY_MB"]
    return free, float(cpus), float(memory)


def after(host: SimHost, request: TraceRequest) -> tuple[np.ndarray, float, float] | None:
    """:func:`host_capacity` once ``request`` is placed on ``host`` (None: no GPU room).

    Whole GPUs come off free GPUs (which ones does not change the measures); vGPUs off
    the first GPU with room, as nova-compute takes them.
    """
    free, cpus, memory = host_capacity(host)
    free = free.copy()
    if request.gpus:
        idle = np.flatnonzero(free >= 1.0 - 1e-9)
        if len(idle) < request.gpus:
            return None
        free[idle[:request.gpus]] = 0.0
    elif request.vgpus:
        slots = host.vgpu_slots
        if not slots:
            return None
        share = request.vgpus / slots
        room = np.flatnonzero(free >= share - 1e-9)
        if not len(room):
            return None
        free[room[0]] -= share
    return free, cpus - request.vcpus, memory - request.memory_mb


class PolicyOrder:
    """Orders the hosts that passed the filters by a policy's score, best first.

    Scores are kept per host state (a host's :meth:`SimHost.state` is a new object after
    each change) and request kind, so an event scores again only the hosts that changed.
    """

    def __init__(self, policy: str, workload: Workload) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r} (known: {', '.join(POLICIES)})")
        self.policy = policy
        self.workload = workload
        self._before: dict[str, tuple[object, float]] = {}
        self._scores: dict[tuple[str, tuple], tuple[object, float]] = {}

    def order(self, hosts: Sequence[str], cloud_hosts: dict[str, SimHost],
              request: TraceRequest) -> list[str]:
        """``hosts`` by ascending score (stable: ties keep the offered order)."""
        kind = (request.vcpus, request.memory_mb, request.gpus, request.vgpus,
                request.products)
        scores = []
        for name in hosts:
            host = cloud_hosts[name]
            token = host.state("vgpu" if request.vgpus else "pci")
            kept = self._scores.get((name, kind))
            if kept is not None and kept[0] is token:
                scores.append(kept[1])
                continue
            score = self.score(host, request, token)
            self._scores[(name, kind)] = (token, score)
            scores.append(score)
        ranked = sorted(range(len(hosts)), key=scores.__getitem__)
        return [hosts[i] for i in ranked]

    def score(self, host: SimHost, request: TraceRequest, token: object) -> float:
        """The policy's score of placing ``request`` on ``host`` (lower is better)."""
        placed = after(host, request)
        if placed is None:
            return float("inf")
        free, cpus, memory = placed
        if self.policy == "best-fit":
            total_cpus = (host.inventories["PCPU"].total if "PCPU" in host.inventories
                          else 0)
            return (float(free.sum()) / max(1, len(free))
                    + (cpus / total_cpus if total_cpus else 0.0))
        product = host.spec.board["gpu"]["product_id"]
        kept = self._before.get(host.name)
        if kept is not None and kept[0] is token:
            before = kept[1]
        else:
            before = self.workload.fragmentation(*host_capacity(host), product)
            self._before[host.name] = (token, before)
        return self.workload.fragmentation(free, cpus, memory, product) - before
