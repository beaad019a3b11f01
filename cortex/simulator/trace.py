"""Traces of GPU VM requests: our trace files, Alibaba's pod lists, and a synthetic generator.

Trace file (YAML or JSON)::

    requests: [{id, arrival (s), departure? (s, null: stays), gpus? (passthrough GPUs),
                vgpus? (vGPUs), vcpus, memory_mb, numa_nodes? (guest NUMA cells, 0 =
                none), numa_policy? (PCI NUMA affinity: required|legacy|preferred|socket),
                cpu_policy? (dedicated|shared), products? [PCI product ids, any of],
                mig_profile? (the MIG profile each vGPU must be, e.g. 3g.40gb)}]

Alibaba's pod lists (``openb_pod_list_*.csv``: ``name, cpu_milli, memory_mib, num_gpu,
gpu_milli[, gpu_spec, ..., creation_time, deletion_time]``): a pod is one VM request.
Pods without GPUs are left out; a pod with a fraction of one GPU (``gpu_milli`` < 1000)
asks for vGPUs (see ``alibaba-models.yaml``); CPUs are rounded up to whole pinned CPUs
(even for two NUMA cells); guests of 8 GPUs or more get two NUMA cells, the others one;
the PCI NUMA policy is Nova's default, ``legacy``. ``gpu_spec`` (models, ``|``-joined)
becomes the product ids the request accepts. With ``mig`` a fractional pod asks instead
one vGPU of the MIG profile with its share of the GPU's compute
(:func:`cortex.simulator.mig.pod_profile`), without product ids. In ``fill`` mode the
pods arrive in their order of creation and never leave (the method of Weng et al., ATC
'23, who fill the cluster with the trace's tasks); in ``timeline`` mode they leave at
``deletion_time``. :func:`inflate` draws a workload from the pods as Weng et al. do for
their measure: at random, with replacement, until the arrived demand reaches a share of
the fleet.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cortex.documents import load_document
from cortex.rules.mig_slots import A100_80GB
from cortex.simulator.fleet import (
    Fleet,
    SimulationError,
    _csv_rows,
    alibaba_models,
)
from cortex.simulator.mig import pod_profile

NUMA_POLICIES = ("required", "legacy", "preferred", "socket")
MODES = ("timeline", "fill")
TRACE_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["requests"], "properties": {
        "description": {"type": "string"},
        "requests": {"type": "array", "items": {
            "type": "object", "additionalProperties": False,
            "required": ["id", "arrival", "vcpus", "memory_mb"],
            "properties": {
                "id": {"type": "string"}, "arrival": {"type": "number", "minimum": 0},
                "departure": {"type": ["number", "null"], "minimum": 0},
                "gpus": {"type": "integer", "minimum": 0},
                "vgpus": {"type": "integer", "minimum": 0},
                "vcpus": {"type": "integer", "minimum": 1},
                "memory_mb": {"type": "integer", "minimum": 1},
                "numa_nodes": {"type": "integer", "minimum": 0, "maximum": 8},
                "numa_policy": {"enum": [*NUMA_POLICIES, None]},
                "cpu_policy": {"enum": ["dedicated", "shared"]},
                "products": {"type": "array", "items": {"type": "string"}},
                "mig_profile": {"type": "string"}}}}},
}
_POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")


@dataclass(frozen=True)
class TraceRequest:
    """One VM request of a trace; times in seconds, memory in MiB.

    ``gpus`` passthrough GPUs, ``vgpus`` vGPUs (one of them is 0); ``numa_nodes`` guest
    NUMA cells (0: no NUMA topology, CPUs float); ``products``: PCI product ids the GPUs
    may be (any of; empty: any GPU); ``mig_profile``: the MIG profile each vGPU must be
    backed by (``3g.40gb``; asked as Nova's flavors ask it, a required trait), None: any
    vGPU.
    """

    id: str
    arrival: float
    departure: float | None
    gpus: int
    vgpus: int
    vcpus: int
    memory_mb: int
    numa_nodes: int = 1
    numa_policy: str | None = "legacy"
    cpu_policy: str = "dedicated"
    products: tuple[str, ...] = ()
    mig_profile: str | None = None


def read_trace(path: str | Path, mode: str = "timeline",
               models: str | Path | None = None,
               overrides: Mapping[str, Any] | None = None,
               mig: bool = False) -> list[TraceRequest]:
    """The requests of a trace file or an Alibaba pod list, by arrival; SimulationError if bad.

    ``models`` and ``overrides`` (:func:`cortex.simulator.fleet.alibaba_models`) and
    ``mig`` (fractional pods as MIG requests, :func:`alibaba_trace`) apply to an
    Alibaba pod list.
    """
    if mode not in MODES:
        raise SimulationError(f"mode must be one of {', '.join(MODES)}")
    path = Path(path)
    if path.suffix == ".csv":
        requests = alibaba_trace(path, mode, models, overrides, mig)
    else:
        data = load_document(path, TRACE_SCHEMA, SimulationError)
        requests = [_request(raw, mode) for raw in data["requests"]]
    ids = [r.id for r in requests]
    if len(set(ids)) != len(ids):
        raise SimulationError(f"{path}: request ids repeat")
    return sorted(requests, key=lambda r: r.arrival)


def _request(raw: Mapping[str, Any], mode: str) -> TraceRequest:
    """A TraceRequest from a trace file entry."""
    if bool(raw.get("gpus")) == bool(raw.get("vgpus")):
        raise SimulationError(f"request {raw['id']}: give either gpus or vgpus (> 0)")
    profile = raw.get("mig_profile")
    if profile is not None:
        if not raw.get("vgpus"):
            raise SimulationError(f"request {raw['id']}: mig_profile needs vgpus")
        if profile not in A100_80GB.profiles:
            raise SimulationError(f"request {raw['id']}: unknown MIG profile {profile!r} "
                                  f"(known: {', '.join(A100_80GB.profiles)})")
    departure = raw.get("departure") if mode == "timeline" else None
    return TraceRequest(raw["id"], float(raw["arrival"]),
                        None if departure is None else float(departure),
                        raw.get("gpus", 0), raw.get("vgpus", 0), raw["vcpus"], raw["memory_mb"],
                        raw.get("numa_nodes", 1), raw.get("numa_policy", "legacy"),
                        raw.get("cpu_policy", "dedicated"), tuple(raw.get("products", ())),
                        profile)


def alibaba_trace(path: Path, mode: str = "fill", models: str | Path | None = None,
                  overrides: Mapping[str, Any] | None = None,
                  mig: bool = False) -> list[TraceRequest]:
    """The GPU pods of an Alibaba pod list as TraceRequests (see the module docstring).

    ``mig``: a fractional pod asks one vGPU of its MIG profile
    (:func:`cortex.simulator.mig.pod_profile`) instead of its share in time-sliced vGPUs.
    """
    rules = alibaba_models(models, overrides)
    products = {name: m["product_id"] for name, m in rules["models"].items()}
    slots = rules["vgpu_slots"]
    requests = []
    for index, row in enumerate(_csv_rows(path, _POD_COLUMNS)):
        gpus, milli = int(row["num_gpu"] or 0), int(row["gpu_milli"] or 0)
        if gpus == 0:
            continue
        fraction = gpus == 1 and milli < 1000
        cells = 2 if gpus >= 8 else 1
        vcpus = max(1, math.ceil(int(row["cpu_milli"]) / 1000))
        vcpus += vcpus % cells
        arrival = float(row.get("creation_time") or index)
        departure = row.get("deletion_time") if mode == "timeline" else None
        spec = [s for s in (row.get("gpu_spec") or "").split("|") if s]
        unknown = [s for s in spec if s not in products]
        if unknown:
            raise SimulationError(f"{path}: pod {row['name']}: unknown GPU model {unknown[0]!r}")
        vgpus = math.ceil(milli * slots / 1000) if fraction else 0
        accepted = tuple(dict.fromkeys(products[s] for s in spec))
        profile = None
        if fraction and mig:
            vgpus, accepted, profile = 1, (), pod_profile(gpus, milli)
        requests.append(TraceRequest(
            row["name"], arrival, float(departure) if departure else None,
            0 if fraction else gpus, vgpus, vcpus, max(1, int(row["memory_mib"])), cells,
            None if fraction else "legacy", "dedicated", accepted, profile))
    return requests


def gpu_demand(request: TraceRequest, vgpu_slots: int) -> float:
    """GPUs ``request`` asks: its passthrough GPUs, or its vGPUs' share of one GPU."""
    return float(request.gpus) if request.gpus else request.vgpus / max(1, vgpu_slots)


def inflate(requests: Sequence[TraceRequest], gpus: float, level: float, seed: int,
            vgpu_slots: int) -> list[TraceRequest]:
    """Requests drawn at random, with replacement, until they ask ``level`` x ``gpus`` GPUs.

    The workload inflation Weng et al. (ATC '23) evaluate with: the trace's GPU tasks,
    sampled (seeded by ``seed``) and submitted one by one without departures until the
    arrived GPU demand (:func:`gpu_demand`) reaches ``level`` (1.0 = 100 %) of the
    cluster's ``gpus``. Each draw is a new request (id ``<pod>#<n>``, arrival ``n``).
    SimulationError when ``requests`` holds no GPU request.
    """
    pool = [r for r in requests if r.gpus or r.vgpus]
    if not pool:
        raise SimulationError("no GPU requests to draw from")
    rng = random.Random(seed)
    drawn: list[TraceRequest] = []
    arrived, wanted = 0.0, level * gpus
    while arrived < wanted:
        request = rng.choice(pool)
        drawn.append(replace(request, id=f"{request.id}#{len(drawn)}",
                             arrival=float(len(drawn)), departure=None))
        arrived += gpu_demand(request, vgpu_slots)
    return drawn


@dataclass(frozen=True)
class SyntheticSpec:
    """What the synthetic generator draws from.

    ``sizes``/``policies``: {value: weight}; ``load``: offered GPU demand over the fleet's
    passthrough GPUs (1.0 = as many GPU-hours asked as the fleet has); ``mean_life``
    seconds (exponential); ``any_product``: share of requests taking any GPU model;
    ``vcpus_per_gpu``/``memory_gb_per_gpu``: choices per GPU.
    """

    requests: int = 1000
    seed: int = 1
    load: float = 1.2
    mean_life: float = 3600.0
    sizes: tuple[tuple[int, float], ...] = ((1, 0.45), (2, 0.25), (4, 0.15), (8, 0.15))
    policies: tuple[tuple[str, float], ...] = (("legacy", 0.6), ("preferred", 0.2),
                                               ("required", 0.1), ("socket", 0.1))
    any_product: float = 0.2
    vcpus_per_gpu: tuple[int, ...] = (4, 8, 12)
    memory_gb_per_gpu: tuple[int, ...] = (32, 64, 96)


def synthetic_trace(fleet: Fleet, spec: SyntheticSpec = SyntheticSpec()) -> list[TraceRequest]:
    """A seeded Poisson stream of GPU VM requests sized for ``fleet`` (deterministic).

    Each request picks a size, then a GPU model among those of the fleet's hosts that
    have that many GPUs (weighted by their GPU count), or any model (``any_product``).
    Guests of more GPUs than one NUMA node of their board holds get two NUMA cells.
    """
    rng = random.Random(spec.seed)
    models = _passthrough_models(fleet)
    if not models:
        raise SimulationError(f"fleet {fleet.name} has no passthrough GPU hosts")
    total = sum(count * gpus for count, gpus, _ in models.values())
    sizes = [s for s in spec.sizes if any(g >= s[0] for _, g, _ in models.values())]
    mean_gpus = sum(k * p for k, p in sizes) / sum(p for _, p in sizes)
    rate = spec.load * total / (mean_gpus * spec.mean_life)
    shares = _product_shares(models, sizes)
    requests, now = [], 0.0
    for index in range(spec.requests):
        now += rng.expovariate(rate)
        gpus = _draw(rng, sizes)
        fitting = {p: m for p, m in models.items() if m[1] >= gpus}
        product = _draw(rng, sorted(shares[gpus].items()))
        per_node = fitting[product][2]
        products = () if rng.random() < spec.any_product else (product,)
        vcpus = gpus * rng.choice(spec.vcpus_per_gpu)
        cells = 2 if gpus > per_node else 1
        requests.append(TraceRequest(
            f"req-{index:05d}", round(now, 3), round(now + rng.expovariate(1 / spec.mean_life), 3),
            gpus, 0, vcpus + vcpus % cells, gpus * 1024 * rng.choice(spec.memory_gb_per_gpu),
            cells, _draw(rng, spec.policies), "dedicated", products))
    return requests


def _product_shares(models: Mapping[str, tuple[int, int, int]],
                    sizes: Sequence[tuple[int, float]]) -> dict[int, dict[str, float]]:
    """Per request size, the weight of each GPU model, for GPU demand in proportion to GPUs.

    Every model gets GPU demand in proportion to its GPUs as far as the sizes it can hold
    allow. Water-filling from the largest size down: a size's demand goes to the models that can
    hold it in proportion to what each still lacks of its share (to their capacity when
    none lacks anything).
    """
    capacity = {p: m[0] * m[1] for p, m in models.items()}
    total_capacity = sum(capacity.values())
    demand = sum(k * w for k, w in sizes)
    lacking = {p: c / total_capacity * demand for p, c in capacity.items()}
    shares: dict[int, dict[str, float]] = {}
    for k, weight in sorted(sizes, reverse=True):
        fitting = [p for p, m in models.items() if m[1] >= k]
        gaps = {p: max(0.0, lacking[p]) for p in fitting}
        if not any(gaps.values()):
            gaps = {p: float(capacity[p]) for p in fitting}
        total = sum(gaps.values())
        shares[k] = {p: gaps[p] / total for p in fitting}
        for p in fitting:
            lacking[p] -= k * weight * shares[k][p]
    return shares


def _passthrough_models(fleet: Fleet) -> dict[str, tuple[int, int, int]]:
    """``{product id: (hosts, most GPUs per host, fewest GPUs per NUMA node)}``."""
    from cortex.simulator.boards import gpu_list, node_count

    models: dict[str, tuple[int, int, int]] = {}
    for host in fleet.hosts:
        if host.board.get("vgpu_slots"):
            continue
        gpus = len(gpu_list(host.board))
        if not gpus:
            continue
        product = host.board["gpu"]["product_id"]
        per_node = math.ceil(gpus / node_count(host.board))
        count, most, fewest = models.get(product, (0, 0, per_node))
        models[product] = (count + 1, max(most, gpus), min(fewest, per_node))
    return models


def _draw(rng: random.Random, weighted: Sequence[tuple[Any, float]]) -> Any:
    """One value of ``[(value, weight)]``, with probability proportional to its weight."""
    values = [v for v, _ in weighted]
    return rng.choices(values, weights=[w for _, w in weighted])[0]
