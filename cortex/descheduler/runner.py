"""One descheduler pass: detect, plan through the pipelines, record, and (not dry) move.

The plan is :func:`cortex.scheduler.deschedule.plan` on the API's own services (the
knowledge view, the scheduler and its pipelines, the decision log), so a target is
what the scheduler would answer Nova for that move. A move's body is the instance's
RequestSpec as Nova would rebuild it for the move: its synced flavor (``servers``
table, Nova's embedded flavor) and, where the instance holds passthrough GPUs, a PCI
request for as many of the same model (Nova keeps the instance's own PCI requests;
the servers API does not show them, the agent's report of which instance holds which
GPU does). The image's properties are not in the servers API and are left out.

Moves are written before Nova is asked (:mod:`cortex.store.moves`), then made one at a
time, each followed to its end (:class:`cortex.descheduler.nova.NovaMover`).

Before a pass plans anything, the moves earlier passes left open (``running``: their
process was killed; ``timed_out``: not done within ``move_timeout``) are looked at in
Nova (:func:`follow_open_moves`): one Nova shows ended becomes ``completed`` or
``failed`` with what Nova answered and its ``finished_at``; one Nova still makes, or
that Nova could not be asked about, stays open and keeps its instance from being moved
again (:class:`cortex.scheduler.deschedule.InFlight`). A process's first pass does this
on start; a dry run asks Nova nothing and keeps every open move's instance where it is.
"""

from __future__ import annotations

import logging
import uuid as uuidlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from cortex.knowledge.view import KnowledgeView
from cortex.plugins.base import Detector
from cortex.scheduler.deschedule import InFlight, Limits, Move, plan
from cortex.store.moves import (
    OPEN_STATES,
    finish_move,
    forget_moves,
    note_move,
    open_moves,
    read_history,
    record_moves,
    server_flavors,
    stored_state,
)

LOG = logging.getLogger(__name__)
#: Moves are kept this long (the A -> B -> A check reads them).
MOVE_RETENTION = timedelta(days=30)


class DeschedulerMetrics:
    """The descheduler's Prometheus metrics, in a registry of their own.

    ``cortex_descheduler_moves_total{detector,kind,state}`` (state: proposed, skipped,
    completed, failed, timed_out; a move an earlier pass left open counts when a later
    pass sees it end), ``cortex_descheduler_runs_total{outcome}`` (ok, failed),
    ``cortex_descheduler_last_run_timestamp_seconds``.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.moves = Counter("cortex_descheduler_moves", "Moves by detector, kind and end.",
                             ("detector", "kind", "state"), registry=self.registry)
        self.runs = Counter("cortex_descheduler_runs", "Descheduler runs by outcome.",
                            ("outcome",), registry=self.registry)
        self.last_run = Gauge("cortex_descheduler_last_run_timestamp_seconds",
                              "When the last run ended (Unix time).", registry=self.registry)


@dataclass
class MoveResult:
    """A planned move and how it ended here: ``state`` as stored, ``detail`` why."""

    move: Move
    state: str
    detail: str
    id: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The move with its final state, as ``--format json`` prints it."""
        return self.move.as_dict() | {"id": self.id, "state": self.state,
                                      "detail": self.detail}


@dataclass
class RunReport:
    """What one pass did: ``run_id``, whether it executed, and every move's result.

    ``followed``: the moves earlier passes left open, as this pass found them (state
    ``completed`` or ``failed`` when Nova showed them ended, else as they were).
    """

    run_id: str
    executed: bool
    results: list[MoveResult] = field(default_factory=list)
    followed: list[MoveResult] = field(default_factory=list)

    @property
    def failed(self) -> int:
        """Moves asked of Nova in this pass that did not complete."""
        return sum(r.state in ("failed", "timed_out") for r in self.results)

    @property
    def not_asked(self) -> list[str]:
        """The instances of open moves Nova could not be asked about (not moved again)."""
        return [r.move.instance_uuid for r in self.followed if r.state == "unknown"]


def move_spec(view: KnowledgeView, instance_uuid: str, host: str,
              server: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The RequestSpec data of moving ``instance_uuid`` off ``host``; None without a flavor.

    ``server`` is the synced row (:func:`cortex.store.moves.server_flavors`).
    """
    flavor = (server or {}).get("flavor") or {}
    if not flavor.get("vcpus") or not flavor.get("ram"):
        return None
    extra_specs = dict(flavor.get("extra_specs") or {})
    data: dict[str, Any] = {
        "flavor": {"nova_object.data": {
            "name": flavor.get("original_name") or "unknown", "vcpus": flavor["vcpus"],
            "memory_mb": flavor["ram"], "root_gb": flavor.get("disk") or 0,
            "ephemeral_gb": flavor.get("ephemeral") or 0, "swap": flavor.get("swap") or 0,
            "extra_specs": extra_specs}},
        "image": {"nova_object.data": {"properties": {"nova_object.data": {}}}},
        "instance_uuid": instance_uuid, "num_instances": 1,
        "project_id": server.get("project_id") if server else None,
        "user_id": server.get("user_id") if server else None,
        "availability_zone": server.get("availability_zone") if server else None}
    state = view.hosts.get(host)
    held = [g for g in (state.topology.gpus if state and state.topology else ())
            if g.instance_uuid == instance_uuid and g.passthrough]
    if held:
        models = sorted({(g.vendor_id, g.device_id) for g in held})
        data["pci_requests"] = {"nova_object.data": {"requests": [{"nova_object.data": {
            "count": len(held), "alias_name": "held",
            "spec": [{"vendor_id": v, "product_id": d} for v, d in models if d]
            or [{"vendor_id": v} for v, _ in models],
            "numa_policy": extra_specs.get("hw:pci_numa_affinity_policy", "legacy"),
            "request_id": None}}]}}
    return data


def run_once(services: Any, detectors: Sequence[Detector], limits: Limits, execute: bool,
             cooldown: float, mover: Callable[[], Any] | None = None, record: bool = True,
             metrics: DeschedulerMetrics | None = None,
             now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> RunReport:
    """One pass on the API's ``services``; ``mover()`` gives the NovaMover that executes.

    ``mover`` is called once, when an open move is to be looked at or before the first
    move is stored (a pass with neither never connects to Nova; one whose mover cannot
    be built stores no move ``running``). ``cooldown`` in seconds.

    Raises SchedulingFailed (503) when the knowledge cannot be read, and the database's
    errors; a move Nova refuses is a failed move, not an error.
    """
    started = now()
    run_id = str(uuidlib.uuid4())
    engine = services.engine
    report = RunReport(run_id, execute)
    with engine.connect() as connection:
        earlier = open_moves(connection)
    nova = None
    if earlier and execute:
        nova, report.followed = follow_open_moves(engine, earlier, mover, now, metrics)
    else:
        report.followed = [MoveResult(_as_move(row), row["state"], f"still {row['state']} "
                                      "here; a dry run does not ask Nova", row["id"])
                           for row in earlier]
    in_flight = [InFlight(r.move.instance_uuid, r.move.source, r.move.target, r.detail)
                 for r in report.followed if r.state not in ("completed", "failed")]
    if report.not_asked:
        LOG.warning("descheduler: Nova could not be asked about the open moves of %s; "
                    "they are not moved again", ", ".join(report.not_asked))
    with engine.connect() as connection:
        history = read_history(connection, started, cooldown)
    view = services.knowledge.view()

    def bodies(instance_uuid: str, host: str) -> dict[str, Any] | None:
        with engine.connect() as connection:
            server = server_flavors(connection, [instance_uuid]).get(instance_uuid)
        return move_spec(view, instance_uuid, host, server)

    moves = plan(services.scheduler, detectors, bodies, history, limits, started,
                 record=record, parse=services.parsers["nova"], in_flight=in_flight)
    if execute and nova is None and any(m.state == "planned" for m in moves):
        nova = mover()  # before the moves are stored running: no record of a move not asked
    with engine.begin() as connection:
        ids = record_moves(connection, run_id, moves, started, execute)
        forget_moves(connection, started - MOVE_RETENTION)
    for move, move_id in zip(moves, ids, strict=True):
        state = stored_state(move.state, execute)
        result = MoveResult(move, state, move.detail, move_id)
        report.results.append(result)
        if state == "running":
            LOG.info("descheduler: moving %s from %s to %s (%s): %s", move.instance_uuid,
                     move.source, move.target, move.kind, move.reason)
            outcome = nova.move(move.instance_uuid, move.source, move.target, move.kind)
            result.state, result.detail = outcome.state, outcome.detail
            with engine.begin() as connection:
                finish_move(connection, move_id, outcome.state, outcome.detail, now())
            LOG.log(logging.INFO if outcome.state == "completed" else logging.WARNING,
                    "descheduler: move of %s %s: %s", move.instance_uuid, outcome.state,
                    outcome.detail)
        if metrics is not None:
            metrics.moves.labels(move.detector, move.kind, result.state).inc()
    if metrics is not None:
        metrics.runs.labels("ok").inc()
        metrics.last_run.set(now().timestamp())
    return report


def follow_open_moves(engine: Any, rows: Sequence[Mapping[str, Any]],
                      mover: Callable[[], Any] | None, now: Callable[[], datetime],
                      metrics: DeschedulerMetrics | None = None) -> tuple[Any, list[MoveResult]]:
    """Look at each open move of ``rows`` (:func:`cortex.store.moves.open_moves`) in Nova.

    ``(the NovaMover or None, each move's result)``. A move Nova shows ended is stored
    ``completed`` or ``failed`` with Nova's answer and ``finished_at``; one still under
    way keeps its state, its ``detail`` Nova's answer; one Nova could not be asked about
    (the mover not built, Nova's API or the connection failing) keeps its state and
    detail, its result ``unknown``.
    """
    def not_asked(why: object) -> tuple[None, list[MoveResult]]:
        return None, [MoveResult(_as_move(row), "unknown", f"Nova could not be asked: {why}",
                                 row["id"]) for row in rows]

    if mover is None:
        return not_asked("no Nova connection is configured")
    try:
        nova = mover()
    except Exception as exc:  # the credentials or the catalog: nothing known of the moves
        return not_asked(exc)
    results = []
    for row in rows:
        move = _as_move(row)
        outcome = nova.look(move.instance_uuid, move.target, move.kind)
        state = outcome.state if outcome.state in ("completed", "failed", "unknown") \
            else row["state"]
        with engine.begin() as connection:
            if state in OPEN_STATES:
                note_move(connection, row["id"], outcome.detail)
            elif state != "unknown":
                finish_move(connection, row["id"], state, outcome.detail, now())
        LOG.log(logging.WARNING if state in ("failed", "unknown") else logging.INFO,
                "descheduler: the earlier move of %s (%s -> %s, %s): %s: %s",
                move.instance_uuid, move.source, move.target, row["state"], state,
                outcome.detail)
        if metrics is not None and state in ("completed", "failed"):
            metrics.moves.labels(move.detector, move.kind, state).inc()
        results.append(MoveResult(move, state, outcome.detail, row["id"]))
    return nova, results


def _as_move(row: Mapping[str, Any]) -> Move:
    """A ``descheduler_moves`` row as the Move it recorded."""
    return Move(row["instance_uuid"], row["source_host"], row["target_host"], row["detector"],
                row["reason"], row["kind"], row["state"], row["detail"], row["decision_id"],
                row["gpus_won"], row["project_id"])
