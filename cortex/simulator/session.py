"""One ``cortex-manage simulate`` session: resolve fleets and trace, replay per pipeline."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cortex.pipeline.config import PipelineConfigError, PipelineSet, load_pipelines
from cortex.pipeline.overrides import with_overrides
from cortex.simulator.fleet import Fleet, SimulationError, read_fleet
from cortex.simulator.policies import with_policies
from cortex.simulator.replay import RunResult, replay
from cortex.simulator.trace import (
    SyntheticSpec,
    TraceRequest,
    inflate,
    read_trace,
    synthetic_trace,
)

SYNTHETIC = "synthetic"


@dataclass
class SimulationSpec:
    """What to simulate.

    ``fleets``: fleet files, Alibaba node CSVs, or shipped fleet names (``hgx``, ``mixed``
    for ``etc/cortex/simulator/fleet-<name>.yaml``); ``trace``: a trace file, an Alibaba
    pod CSV, or ``synthetic`` (generated per fleet from ``synthetic``); ``pipelines``:
    names, the first one the subject, the others compared with it; ``limit``: the first
    N requests only; ``max_rejections``: stop a replay after that many rejections;
    ``shuffle``: in ``fill`` mode, replay the requests in an order shuffled with this seed
    (Weng et al. draw the tasks of the trace at random); ``seeds``: replay that many
    variants, the synthetic trace's seed (or the shuffle's) counted up from the one given;
    ``device_order``: the simulated trackers' device order
    (:data:`cortex.simulator.cloud.DEVICE_ORDERS`; ``shuffled``: seeded per seed and host,
    the prediction errors of a tracker the weighers' model does not know);
    ``gpu_sharing``/``vgpu_slots``: override the Alibaba model rules' (None: the file's;
    :data:`cortex.simulator.fleet.ALIBABA_SHARING`, ``any`` lets fractional pods share
    any GPU, as Weng et al. simulate); ``mig_requests``: an Alibaba pod list's
    fractional pods ask one vGPU of a MIG profile instead, for fleets of MIG boards
    (:func:`cortex.simulator.trace.alibaba_trace`);
    ``candidate_order``: the order the hosts are offered in
    (:data:`cortex.simulator.replay.CANDIDATE_ORDERS`; ``shuffled`` decides the ties at
    random, seeded per seed and arrival);
    ``fragmentation_sizes``: ``options`` (each pipeline's own) or ``trace``: the views
    carry the trace's passthrough sizes as the recorded demand and every pipeline's
    ``weigher_gpu_fragmentation`` measures against them (``sizes_from: demand``);
    ``inflate``: in ``fill`` mode, replay instead requests drawn from the trace at random
    with replacement until they ask that share of the fleet's GPUs (1.0 = all of them;
    :func:`cortex.simulator.trace.inflate`, seeded by ``shuffle`` or 0, counted up per
    seed); ``fast``: carry the steps' per-host answers between events
    (:class:`cortex.simulator.replay.CarriedAnswers`, the same decisions). ``pipelines``
    may also name the policies of :mod:`cortex.simulator.policies` (``fgd``,
    ``best-fit``).
    """

    fleets: Sequence[str]
    trace: str
    pipelines: Sequence[str]
    pipelines_file: str | None = None
    mode: str = "timeline"
    sample_nodes: int = 1
    limit: int | None = None
    max_rejections: int | None = None
    pack_numa_cells: bool = False
    models: str | None = None
    shuffle: int | None = None
    synthetic: SyntheticSpec = field(default_factory=SyntheticSpec)
    seeds: int = 1
    device_order: str = "pci"
    fragmentation_sizes: str = "options"
    candidate_order: str = "fleet"
    gpu_sharing: str | None = None
    vgpu_slots: int | None = None
    mig_requests: bool = False
    inflate: float | None = None
    fast: bool = True

    @property
    def model_overrides(self) -> dict[str, Any]:
        """The Alibaba model rules this spec overrides (``gpu_sharing``, ``vgpu_slots``)."""
        return {"gpu_sharing": self.gpu_sharing, "vgpu_slots": self.vgpu_slots}


@dataclass
class FleetRuns:
    """The runs of every pipeline on one fleet and its trace.

    ``runs``: one per pipeline, in the spec's order, of the first seed; ``by_seed``: the
    same for every seed (``by_seed[0] is runs``).
    """

    fleet: Fleet
    trace_name: str
    requests: int
    runs: list[RunResult]
    by_seed: list[list[RunResult]] = field(default_factory=list)


def resolve_fleet(name: str) -> Path:
    """A fleet path: ``name`` itself when it exists, else a shipped ``fleet-<name>.yaml``."""
    path = Path(name)
    if path.exists():
        return path
    from cortex.conf import ConfigError, shipped_file

    for candidate in (f"simulator/fleet-{name}.yaml", f"simulator/{name}.yaml",
                      f"simulator/{name}"):
        try:
            return shipped_file(candidate)
        except ConfigError:
            continue
    raise SimulationError(f"fleet {name!r}: no such file and no shipped fleet of that name")


def load_trace(spec: SimulationSpec, fleet: Fleet) -> tuple[str, list[TraceRequest]]:
    """``(trace name, requests)`` for ``fleet``, cut to ``spec.limit``."""
    if spec.trace == SYNTHETIC:
        requests = synthetic_trace(fleet, spec.synthetic)
        if spec.mode == "fill":
            requests = [replace(r, departure=None) for r in requests]
        name = (f"synthetic (seed {spec.synthetic.seed}, load {spec.synthetic.load:g}, "
                f"{spec.synthetic.requests} requests)")
    else:
        requests = read_trace(spec.trace, spec.mode, spec.models, spec.model_overrides,
                              spec.mig_requests)
        name = f"{Path(spec.trace).name} ({spec.mode})"
    if spec.inflate is not None:
        if spec.mode != "fill":
            raise SimulationError("inflate needs --mode fill (drawn requests never leave)")
        slots = next((int(h.board.get("vgpu_slots") or 0) for h in fleet.hosts
                      if h.board.get("vgpu_slots")), 1)
        seed = spec.shuffle or 0
        requests = inflate(requests, fleet.gpus, spec.inflate, seed, slots)
        name += f", drawn to {100 * spec.inflate:g} % of the GPUs (seed {seed})"
        return name, requests[:spec.limit] if spec.limit else requests
    if spec.shuffle is not None:
        if spec.mode != "fill":
            raise SimulationError("--shuffle needs --mode fill (departures keep their times)")
        random.Random(spec.shuffle).shuffle(requests)
        requests = [replace(r, arrival=float(i)) for i, r in enumerate(requests)]
        name += f", shuffled (seed {spec.shuffle})"
    return name, requests[:spec.limit] if spec.limit else requests


def simulate(spec: SimulationSpec, progress: Callable[[str], None] = lambda _: None
             ) -> list[FleetRuns]:
    """Replay the trace on every fleet through every pipeline; SimulationError if unusable."""
    from cortex import conf

    path = spec.pipelines_file or conf.shipped_file("pipelines.yaml")
    try:
        pipelines = load_pipelines(path)
    except PipelineConfigError as exc:
        raise SimulationError(str(exc)) from None
    pipelines = with_policies(pipelines, spec.pipelines)
    unknown = [p for p in spec.pipelines if p not in pipelines.pipelines]
    if unknown:
        raise SimulationError(f"unknown pipeline {unknown[0]!r} in {path}")
    if spec.fragmentation_sizes not in FRAGMENTATION_SIZES:
        raise SimulationError(f"fragmentation sizes come from "
                              f"{' or '.join(FRAGMENTATION_SIZES)}, not "
                              f"{spec.fragmentation_sizes!r}")
    if spec.sample_nodes < 1:
        raise SimulationError("--sample-nodes must be at least 1")
    if spec.seeds < 1:
        raise SimulationError("--seeds must be at least 1")
    if (spec.seeds > 1 and spec.trace != SYNTHETIC and spec.shuffle is None
            and spec.inflate is None):
        raise SimulationError("--seeds needs the synthetic trace or --shuffle (a trace file "
                              "replayed in its own order is the same every time)")
    results = []
    for name in spec.fleets:
        fleet = read_fleet(resolve_fleet(name), spec.sample_nodes, spec.models,
                           overrides=spec.model_overrides)
        by_seed, trace_name, count = [], "", 0
        for offset in range(spec.seeds):
            seeded = _seeded(spec, offset)
            named, requests = load_trace(seeded, fleet)
            trace_name, count = trace_name or named, count or len(requests)
            runs = []
            sizes, used = None, pipelines
            if spec.fragmentation_sizes == "trace":
                sizes, used = request_sizes(requests), trace_sizes(pipelines, requests)
            for pipeline in spec.pipelines:
                run = replay(fleet, requests, used, pipeline,
                             pack_numa_cells=spec.pack_numa_cells,
                             max_rejections=spec.max_rejections,
                             device_order=spec.device_order, seed=offset,
                             request_sizes=sizes, candidate_order=spec.candidate_order,
                             fast=spec.fast)
                progress(f"{fleet.name}: {pipeline}: {len(run.decisions)} requests in "
                         f"{run.wall_s:.1f} s")
                runs.append(run)
            by_seed.append(runs)
        if spec.seeds > 1:
            trace_name += f", {spec.seeds} seeds"
        results.append(FleetRuns(fleet, trace_name, count, by_seed[0], by_seed))
    return results


#: Where the fragmentation weigher's passthrough sizes come from in a simulation.
FRAGMENTATION_SIZES = ("options", "trace")
_FRAGMENTATION = "weigher_gpu_fragmentation"


def request_sizes(trace: Sequence[TraceRequest]) -> dict[int, int]:
    """``{GPUs: requests}`` of the trace's passthrough requests."""
    return dict(Counter(r.gpus for r in trace if r.gpus))


def trace_sizes(pipelines: PipelineSet, trace: Sequence[TraceRequest] = ()) -> PipelineSet:
    """``pipelines`` with every ``weigher_gpu_fragmentation`` measuring the trace's sizes.

    Passthrough sizes as the recorded demand (``sizes_from: demand``, the view carries
    them); vGPU sizes (``vgpu_sizes``) as the shares of the ``trace``'s vGPU requests,
    when it has any: the shipped shares are counts of quarter GPUs, which a finer
    ``vgpu_slots`` makes meaningless; and ``vgpu_request_share`` as their share of the
    trace's GPU requests, so GPUs shared any way are measured over both kinds at once.
    """
    options: dict[str, object] = {"sizes_from": "demand", "min_learned": 1}
    vgpus = Counter(r.vgpus for r in trace if r.vgpus)
    if vgpus:
        options["vgpu_sizes"] = {str(k): float(v) for k, v in sorted(vgpus.items())}
        whole = sum(1 for r in trace if r.gpus)
        options["vgpu_request_share"] = vgpus.total() / (vgpus.total() + whole)
    changed = {name: with_overrides(p, {_FRAGMENTATION: options})
               if any(s.name == _FRAGMENTATION for s in p.weighers) else p
               for name, p in pipelines.pipelines.items()}
    return replace(pipelines, pipelines=changed)


def _seeded(spec: SimulationSpec, offset: int) -> SimulationSpec:
    """``spec`` with its synthetic seed (or its shuffle) ``offset`` further."""
    if not offset:
        return spec
    if spec.shuffle is not None or spec.inflate is not None:
        return replace(spec, shuffle=(spec.shuffle or 0) + offset)
    return replace(spec, synthetic=replace(spec.synthetic, seed=spec.synthetic.seed + offset))
