"""What the descheduler wins back: whole NVLink cells freed in a churned simulated cloud.

A trace is replayed through a pipeline up to ``stop_at`` seconds (arrivals after it
are left out, departures after it do not happen), leaving the cloud as churn left it.
Then descheduler passes run on that cloud (:func:`cortex.scheduler.deschedule.plan`,
the pipeline choosing every target, cold migrations of passthrough GPU instances
allowed) and each planned move is made as nova-compute would make it: the instance's
claim released on its source and claimed on the target. Passes repeat until one plans
no move or ``passes`` ran; an instance moves at most once and never back.
:func:`free_cells` counts the free whole NVLink cells before and after.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta

from cortex.knowledge.view import KnowledgeView
from cortex.pipeline.config import PipelineSet
from cortex.plugins.base import Detector
from cortex.request.nova import NovaRequest
from cortex.rules.gpu_sets import free_gpus, gpu_map, whole_cell_gpus
from cortex.scheduler.deschedule import Limits, Move, move_body, plan
from cortex.scheduler.service import SchedulerService
from cortex.simulator.cloud import EPOCH, SimCloud
from cortex.simulator.fleet import Fleet
from cortex.simulator.replay import SETTINGS, replay, request_body
from cortex.simulator.trace import TraceRequest

#: Per pass: up to 20 moves, a host in one; passthrough GPU instances cold-migrated.
SCENARIO_LIMITS = Limits(max_moves=20, cold_migrate_passthrough=True)


def free_cells(view: KnowledgeView, size: int) -> int:
    """Free whole NVLink cells of at least ``size`` GPUs over the hosts of ``view``.

    Per host, its whole-cell free GPUs (:func:`cortex.rules.gpu_sets.whole_cell_gpus`)
    divided by ``size``, on hosts whose largest NVLink clique has ``size`` GPUs or more.
    """
    found = 0
    for state in view.hosts.values():
        topology = state.topology
        if topology is None or not topology.gpus:
            continue
        gpus = gpu_map(topology)
        usable = gpus.mask(g.pci_address for g in topology.gpus if g.passthrough and g.healthy)
        if max(gpus.clique_sizes(usable, "nvlink"), default=0) < size:
            continue
        found += whole_cell_gpus(topology, free_gpus(topology)) // size
    return found


@dataclass
class _Moved:
    """The scenario's history: every instance moved and the hosts it left."""

    sources: dict[str, set[str]] = field(default_factory=dict)

    def moved_recently(self, instance_uuid: str) -> bool:
        """Moved once already in this scenario."""
        return instance_uuid in self.sources

    def left(self, instance_uuid: str) -> frozenset[str]:
        """The hosts it left."""
        return frozenset(self.sources.get(instance_uuid, ()))


@dataclass
class WinBack:
    """The scenario's result.

    Before and after: free whole NVLink cells of ``cell_size`` GPUs and the GPUs in
    whole free cells; ``instances`` placed when the descheduler started; the moves made
    (``gpus_moved``: the GPUs their instances hold), candidates skipped, moves that did
    not fit when made (``failed``) and the passes run.
    """

    cell_size: int
    cells_before: int
    cells_after: int
    whole_gpus_before: int
    whole_gpus_after: int
    instances: int
    moves: list[Move] = field(default_factory=list)
    gpus_moved: int = 0
    skipped: int = 0
    failed: int = 0
    passes: int = 0


def win_back(fleet: Fleet, trace: Sequence[TraceRequest], pipelines: PipelineSet,
             pipeline: str, stop_at: float, detectors: Sequence[Detector],
             limits: Limits = SCENARIO_LIMITS,
             passes: int = 10, cell_size: int = 8) -> WinBack:
    """Replay ``trace`` to ``stop_at`` through ``pipeline``, then deschedule (module doc)."""
    kept = [replace(r, departure=r.departure if r.departure is not None
                    and r.departure <= stop_at else None)
            for r in trace if r.arrival < stop_at]
    clouds: list[SimCloud] = []

    def keep(_kind: str, _request: TraceRequest, cloud: SimCloud) -> None:
        if not clouds:
            clouds.append(cloud)

    replay(fleet, kept, pipelines, pipeline, on_event=keep)
    cloud = clouds[0]
    requests = {r.id: r for r in kept}
    before = cloud.view()
    result = WinBack(cell_size, free_cells(before, cell_size), 0,
                     sum(whole_cell_gpus(s.topology, free_gpus(s.topology))
                         for s in before.hosts.values() if s.topology),
                     0, sum(len(h.allocations) for h in cloud.hosts.values()))
    service = SchedulerService(pipelines, cloud, SETTINGS)
    history = _Moved()
    now = EPOCH + timedelta(seconds=stop_at)

    def bodies(instance: str, host: str) -> Mapping | None:
        request = requests.get(instance)
        if request is None:
            return None
        return request_body(request, [], {}, pipeline)["spec"]["nova_object.data"]

    for _ in range(passes):
        result.passes += 1
        moves = plan(service, detectors, bodies, history, limits, now, pipeline=pipeline)
        made = [m for m in moves if m.state == "planned"]
        result.skipped += sum(m.state == "skipped" for m in moves)
        for move in made:
            spec = bodies(move.instance_uuid, move.source)
            request = NovaRequest.from_body(move_body(spec, move.source, [move.target], {},
                                                      move.kind))
            source, target = cloud.hosts[move.source], cloud.hosts[move.target]
            held = source.allocations[move.instance_uuid]
            source.release(move.instance_uuid)
            if target.claim(move.instance_uuid, request) is None:
                source.claim(move.instance_uuid, request)  # nova-compute would roll back
                result.failed += 1
                continue
            history.sources.setdefault(move.instance_uuid, set()).add(move.source)
            result.moves.append(move)
            result.gpus_moved += len(held.gpus)
        if not made:
            break
    after = cloud.view()
    result.cells_after = free_cells(after, cell_size)
    result.whole_gpus_after = sum(whole_cell_gpus(s.topology, free_gpus(s.topology))
                                  for s in after.hosts.values() if s.topology)
    return result
