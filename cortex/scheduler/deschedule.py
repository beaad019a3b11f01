"""The descheduler's plan: which detected instances move where, chosen by the pipelines.

A run asks its detectors (:class:`cortex.plugins.base.Detector`) for candidates, then,
in the detectors' order and by score, asks the scheduler where each candidate could go:
the body Nova would send to move it (a live migration, or for an instance holding
passthrough GPUs a cold migration, which Nova runs as a resize to the same flavor),
every other host a candidate, as a simulation that promises nothing (Nova's own call
promises when the move is made). A move is therefore never one the scheduler would
refuse. The first host of the answer is the target, except that:

- a host already in ``max_moves_per_host`` moves of this run is passed over, and so is
  a host the descheduler moved the instance off before (no A -> B -> A);
- a move that frees whole NVLink cells (``frees_gpus``) takes the first host that loses
  fewer whole-cell GPUs than the move wins (:func:`cortex.rules.gpu_sets.whole_cell_gpus`
  on the GPUs nova-compute is predicted to hand out there).

Moves planned earlier in the run count as used room on their targets (as holds). An
instance moved within the cool-down (the history says so) is not moved again. The run
stops at ``max_moves`` moves. A move of an earlier run that Nova is still making (or
that Nova could not be asked about), ``in_flight``, keeps its instance where it is and
counts as one of the run's moves and one of its hosts' (source and target): the
descheduler never has more than ``max_moves`` moves under way, nor a host in more than
``max_moves_per_host``. A move of an instance holding passthrough GPUs is only
proposed unless ``cold_migrate_passthrough`` allows it; vGPU (mdev) instances
live-migrate (Nova 2024.1 and later) unless ``live_migrate_vgpu`` is off, then they are
proposed. The reference implementation's descheduler chooses targets through its
pipelines the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from cortex.knowledge.reservations import Reservation, with_reservations
from cortex.plugins.base import Detector, MoveCandidate
from cortex.request.nova import NovaRequest
from cortex.rules.gpu_sets import free_gpus, whole_cell_gpus
from cortex.scheduler.promise import predicted_gpus
from cortex.scheduler.service import SchedulerService, SchedulingFailed, simulation

#: States of a planned move: ``planned`` (may be executed), ``proposed`` (a target was
#: found but this kind of move is not executed), ``skipped`` (no move; ``detail`` says why).
MOVE_STATES = ("planned", "proposed", "skipped")


class History(Protocol):
    """What the descheduler did before (:mod:`cortex.store.moves` in production)."""

    def moved_recently(self, instance_uuid: str) -> bool:
        """Whether the instance was moved (or is moving) within the cool-down."""

    def left(self, instance_uuid: str) -> frozenset[str]:
        """The hosts the descheduler moved the instance off."""


@dataclass(frozen=True)
class NoHistory:
    """A history without moves (the simulator's first run, tests)."""

    def moved_recently(self, instance_uuid: str) -> bool:
        """Never."""
        return False

    def left(self, instance_uuid: str) -> frozenset[str]:
        """None."""
        return frozenset()


@dataclass(frozen=True)
class InFlight:
    """A move of an earlier run not over yet: ``detail`` says what Nova answered last."""

    instance_uuid: str
    source: str
    target: str | None
    detail: str


@dataclass(frozen=True)
class Limits:
    """How much one run may move: moves per run and per host (as source or target).

    ``cold_migrate_passthrough``: execute the cold migrations of instances holding
    passthrough GPUs (else only proposed); ``live_migrate_vgpu``: live-migrate vGPU
    instances (else only proposed).
    """

    max_moves: int = 2
    max_moves_per_host: int = 1
    cold_migrate_passthrough: bool = False
    live_migrate_vgpu: bool = True


@dataclass(frozen=True)
class Move:
    """One instance the run would move: from ``source`` to ``target`` and why.

    ``kind`` is ``live`` or ``cold``; ``state`` one of :data:`MOVE_STATES`; ``detail``
    says why a move is only proposed or skipped; ``decision_id`` the recorded decision
    that chose the target (None when nothing was recorded); ``gpus_won`` the whole-cell
    GPUs the move frees net of what the target loses (0 for other detectors).
    """

    instance_uuid: str
    source: str
    target: str | None
    detector: str
    reason: str
    kind: str
    state: str
    detail: str = ""
    decision_id: str | None = None
    gpus_won: int = 0
    project_id: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The move as JSON (``cortex-descheduler --format json``, the moves table)."""
        return {"instance_uuid": self.instance_uuid, "project_id": self.project_id,
                "source": self.source, "target": self.target, "detector": self.detector,
                "reason": self.reason, "kind": self.kind, "state": self.state,
                "detail": self.detail, "decision_id": self.decision_id,
                "gpus_won": self.gpus_won}


#: ``bodies(instance uuid, host)``: the RequestSpec data (``nova_object.data``) Nova
#: would send to move the instance (flavor, image, project, pci_requests), or None when
#: its flavor is unknown.
Bodies = Callable[[str, str], Mapping[str, Any] | None]


def move_body(spec: Mapping[str, Any], source: str, hosts: Sequence[str], node_of:
              Mapping[str, str], kind: str) -> dict[str, Any]:
    """The external-scheduler body of moving an instance of ``spec`` off ``source``.

    ``kind`` ``live``: ``_nova_check_type`` ``live_migrate`` and ``live: true``, as
    Nova's live migration task asks; ``cold``: ``resize`` and ``resize: true`` (Nova's
    cold migration is a resize to the same flavor). Every host of ``hosts`` but the
    source is a candidate, weight 0; the source is in ``ignore_hosts`` as Nova puts it.
    """
    data = dict(spec)
    hints = dict(data.get("scheduler_hints") or {})
    intent = "live_migrate" if kind == "live" else "resize"
    hints["_nova_check_type"] = [intent]
    data["scheduler_hints"] = hints
    data["ignore_hosts"] = [source]
    offered = [h for h in hosts if h != source]
    return {"spec": {"nova_object.name": "RequestSpec", "nova_object.data": data},
            "hosts": [{"host": h, "hypervisor_hostname": node_of.get(h, h)} for h in offered],
            "weights": dict.fromkeys(offered, 0.0),
            "live": kind == "live", "resize": kind == "cold", "rebuild": False,
            "context": {"request_id": f"req-deschedule-{data.get('instance_uuid')}",
                        "project_id": data.get("project_id")}}


def kind_of(request: NovaRequest) -> str:
    """``cold`` for an instance holding whole devices (passthrough GPUs), else ``live``."""
    return "cold" if request.pci_devices else "live"


def detect(detectors: Sequence[Detector], view: Any, now: datetime) -> list[MoveCandidate]:
    """Every detector's candidates: detectors in order, each's by score (ties: host, uuid)."""
    found: list[MoveCandidate] = []
    for detector in detectors:
        found.extend(sorted(detector.detect(view, now),
                            key=lambda c: (-c.score, c.host, c.instance_uuid)))
    return found


def plan(scheduler: SchedulerService, detectors: Sequence[Detector], bodies: Bodies,
         history: History, limits: Limits, now: datetime, record: bool = False,
         parse: Callable[[Mapping[str, Any]], NovaRequest] = NovaRequest.from_body,
         pipeline: str | None = None, in_flight: Sequence[InFlight] = ()) -> list[Move]:
    """The run's moves, in the order they would be made, and the candidates skipped.

    ``parse`` turns a body into a NovaRequest (the API's parser with its PCI aliases);
    ``record`` writes each target's decision (outcome ``simulated``); ``pipeline`` runs
    that pipeline instead of the choice rules' (the simulator's); ``in_flight`` the
    earlier runs' moves not over (see the module doc). Raises SchedulingFailed when the
    scheduler cannot answer at all (503: no knowledge).
    """
    view = scheduler.knowledge.view()
    nodes = {name: next(iter(state.nodes), name) for name, state in view.hosts.items()}
    hosts = [name for name, state in view.hosts.items() if state.enabled and state.up]
    moves: list[Move] = []
    involved: dict[str, int] = {}
    for earlier in in_flight:
        for host in filter(None, (earlier.source, earlier.target)):
            involved[host] = involved.get(host, 0) + 1
    moving = {earlier.instance_uuid: earlier.detail for earlier in in_flight}
    holds: list[Reservation] = []
    seen: set[str] = set()
    for candidate in detect(detectors, view, now):
        if sum(m.state != "skipped" for m in moves) + len(in_flight) >= limits.max_moves:
            break
        if candidate.instance_uuid in seen:
            continue
        seen.add(candidate.instance_uuid)
        project = next((i.project_id for i in view.hosts[candidate.host].instances
                        if i.uuid == candidate.instance_uuid), None)

        def skip(detail: str, kind: str = "live", candidate: MoveCandidate = candidate,
                 project: str | None = project) -> None:
            moves.append(Move(candidate.instance_uuid, candidate.host, None, candidate.detector,
                              candidate.reason, kind, "skipped", detail, project_id=project))

        if candidate.instance_uuid in moving:
            skip(f"an earlier move is not over: {moving[candidate.instance_uuid]}")
            continue
        if involved.get(candidate.host, 0) >= limits.max_moves_per_host:
            skip(f"{candidate.host} is in {limits.max_moves_per_host} move(s) of this run "
                 "or under way")
            continue
        if history.moved_recently(candidate.instance_uuid):
            skip("moved within the cool-down")
            continue
        spec = bodies(candidate.instance_uuid, candidate.host)
        if spec is None:
            skip("its flavor is unknown (not in the synced servers)")
            continue
        probe = parse(move_body(spec, candidate.host, hosts, nodes, "live"))
        kind = kind_of(probe)
        request = parse(move_body(spec, candidate.host, hosts, nodes, kind)) \
            if kind != "live" else probe
        try:
            decision = scheduler.schedule(request, simulation(
                pipeline=pipeline, record=record, now=now, holds=tuple(holds)))
        except SchedulingFailed as exc:
            if exc.status == 503:
                raise
            decision = exc.decision
        target, detail, won = _target(view, decision.result or (), request, candidate,
                                      history, involved, limits, holds, now)
        if target is None:
            skip(detail, kind)
            continue
        state, why = "planned", ""
        if kind == "cold" and not limits.cold_migrate_passthrough:
            state, why = "proposed", ("holds passthrough GPUs: only a cold migration moves "
                                      "it ([descheduler] cold_migrate_passthrough is off)")
        elif kind == "live" and request.vgpu_devices and not limits.live_migrate_vgpu:
            state, why = "proposed", "holds vGPUs ([descheduler] live_migrate_vgpu is off)"
        moves.append(Move(candidate.instance_uuid, candidate.host, target, candidate.detector,
                          candidate.reason, kind, state, why, decision.id, won, project))
        for host in (candidate.host, target):
            involved[host] = involved.get(host, 0) + 1
        counted = with_reservations(view, holds, now).hosts[target]
        holds.append(Reservation(f"move-{candidate.instance_uuid}", target, None, None,
                                 dict(request.resources), predicted_gpus(counted, request),
                                 now, now + timedelta(hours=1)))
    return moves


def _target(view: Any, answer: Sequence[str], request: NovaRequest, candidate: MoveCandidate,
            history: History, involved: Mapping[str, int], limits: Limits,
            holds: Sequence[Reservation], now: datetime) -> tuple[str | None, str, int]:
    """``(target, why none, whole-cell GPUs won)``: the first acceptable host of ``answer``."""
    if not answer:
        return None, "the pipeline found no host for it", 0
    left = history.left(candidate.instance_uuid)
    counted = with_reservations(view, holds, now) if holds else view
    refused = []
    for host in answer:
        if involved.get(host, 0) >= limits.max_moves_per_host:
            refused.append(f"{host}: in this run's moves or under way")
            continue
        if host in left:
            refused.append(f"{host}: moved off it before")
            continue
        if not candidate.frees_gpus:
            return host, "", 0
        state = counted.hosts[host]
        if state.topology is None:
            return host, "", candidate.frees_gpus
        free = free_gpus(state.topology)
        claimed = set(predicted_gpus(state, request))
        lost = whole_cell_gpus(state.topology, free) - whole_cell_gpus(state.topology,
                                                                        free - claimed)
        if lost < candidate.frees_gpus:
            return host, "", candidate.frees_gpus - lost
        refused.append(f"{host}: would break {lost} whole-cell GPUs")
    return None, "no acceptable host (" + "; ".join(refused[:3]) + ")", 0
