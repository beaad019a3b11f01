"""The descheduler's moves in the database: record them, follow them, read the history.

Every move a run plans is written before anything is asked of Nova (state ``running``
or, in a dry run and for moves not executed, ``proposed``; ``skipped`` with why), and
updated when Nova's answer is known, so a run killed in the middle leaves the move
``running``. A move still ``running`` or ``timed_out`` is open (:data:`OPEN_STATES`):
the next executing pass asks Nova where it stands and ends it, or keeps its instance
from moving again while Nova still moves it. Every move asked of Nova, whatever its
end, holds its instance for the cool-down. The servers' flavors for the moves' bodies
come from the synced ``servers`` table.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, delete, insert, select, update

from cortex.db import models

_TABLE = models.DeschedulerMove.__table__
#: States of a move asked of Nova: each holds its instance for the cool-down, so a move
#: that failed or timed out is not asked again right away (Nova may still be making it).
COOLDOWN_STATES = ("running", "completed", "failed", "timed_out")
#: States in which the instance may have left its source (the A -> B -> A check): a
#: failed move left it where it was.
LEFT_STATES = ("running", "completed", "timed_out")
#: States of a move Nova may still be making: followed at the start of each pass.
OPEN_STATES = ("running", "timed_out")


def stored_state(state: str, execute: bool) -> str:
    """The state a planned move is stored in: ``running`` when executed, ``proposed`` if not.

    Any other state (``proposed``, ``skipped``) is stored as it is.
    """
    if state == "planned":
        return "running" if execute else "proposed"
    return state


def record_moves(connection: Connection, run_id: str, moves: Iterable[Any],
                 now: datetime, execute: bool) -> list[str]:
    """Insert ``moves`` (:class:`cortex.scheduler.deschedule.Move`); their row ids, in order.

    A ``planned`` move is stored ``running`` when ``execute`` (it is about to be asked
    of Nova), else ``proposed``.
    """
    rows = []
    for move in moves:
        state = stored_state(move.state, execute)
        rows.append({"id": str(uuidlib.uuid4()), "run_id": run_id,
                     "instance_uuid": move.instance_uuid, "project_id": move.project_id,
                     "detector": move.detector, "reason": move.reason,
                     "source_host": move.source, "target_host": move.target,
                     "kind": move.kind, "state": state, "detail": move.detail,
                     "decision_id": move.decision_id, "gpus_won": move.gpus_won,
                     "created_at": now,
                     "finished_at": None if state == "running" else now})
    if rows:
        connection.execute(insert(_TABLE), rows)
    return [row["id"] for row in rows]


def finish_move(connection: Connection, move_id: str, state: str, detail: str,
                now: datetime) -> None:
    """Set an open move's ``state`` (completed, failed, timed_out), ``detail`` and end.

    A move that ended already (completed or failed) is left as it is, so a late answer
    never reopens it.
    """
    connection.execute(update(_TABLE).where(_TABLE.c.id == move_id,
                                            _TABLE.c.state.in_(OPEN_STATES)).values(
        state=state, detail=detail, finished_at=now))


def note_move(connection: Connection, move_id: str, detail: str) -> None:
    """Set an open move's ``detail`` (what Nova answered last), its state unchanged."""
    connection.execute(update(_TABLE).where(_TABLE.c.id == move_id,
                                            _TABLE.c.state.in_(OPEN_STATES)).values(
        detail=detail))


def open_moves(connection: Connection) -> list[dict[str, Any]]:
    """The moves in :data:`OPEN_STATES`, oldest first, as dicts of the table's columns."""
    rows = connection.execute(select(_TABLE).where(_TABLE.c.state.in_(OPEN_STATES))
                              .order_by(_TABLE.c.created_at, _TABLE.c.id))
    return [dict(row._mapping) for row in rows]


def list_moves(connection: Connection, limit: int = 100) -> list[dict[str, Any]]:
    """The latest ``limit`` moves, newest first, as dicts of the table's columns."""
    rows = connection.execute(select(_TABLE).order_by(_TABLE.c.created_at.desc(),
                                                      _TABLE.c.id).limit(limit))
    return [dict(row._mapping) for row in rows]


def forget_moves(connection: Connection, before: datetime) -> int:
    """Delete the moves created before ``before``; how many."""
    return connection.execute(delete(_TABLE).where(_TABLE.c.created_at < before)).rowcount


@dataclass(frozen=True)
class MoveHistory:
    """The cycle breaker's view of past moves (:class:`cortex.scheduler.deschedule.History`).

    ``recent``: instances whose move was asked of Nova (:data:`COOLDOWN_STATES`) since
    the cool-down began; ``sources``: per instance, the hosts the descheduler moved it
    off or may have (:data:`LEFT_STATES`, any time kept).
    """

    recent: frozenset[str]
    sources: Mapping[str, frozenset[str]]

    def moved_recently(self, instance_uuid: str) -> bool:
        """Whether the instance moved within the cool-down."""
        return instance_uuid in self.recent

    def left(self, instance_uuid: str) -> frozenset[str]:
        """The hosts the descheduler moved the instance off."""
        return self.sources.get(instance_uuid, frozenset())


def read_history(connection: Connection, now: datetime, cooldown: float) -> MoveHistory:
    """The history of every move kept; ``cooldown`` in seconds, counted from its creation."""
    since = now - timedelta(seconds=cooldown)
    recent: set[str] = set()
    sources: dict[str, set[str]] = {}
    for instance, source, created, state in connection.execute(select(
            _TABLE.c.instance_uuid, _TABLE.c.source_host, _TABLE.c.created_at, _TABLE.c.state
    ).where(_TABLE.c.state.in_(COOLDOWN_STATES))):
        if state in LEFT_STATES:
            sources.setdefault(instance, set()).add(source)
        if _aware(created, now) >= since:
            recent.add(instance)
    return MoveHistory(frozenset(recent), {k: frozenset(v) for k, v in sources.items()})


def _aware(value: datetime, like: datetime) -> datetime:
    """``value`` with ``like``'s time zone when SQLite gave it back naive."""
    return value if value.tzinfo is not None else value.replace(tzinfo=like.tzinfo)


def server_flavors(connection: Connection, uuids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``{uuid: {"flavor", "project_id", "user_id", "availability_zone"}}`` of synced servers.

    Chunked, so any number of uuids stays under the database's parameter limits.
    """
    table = models.Server.__table__
    found: dict[str, dict[str, Any]] = {}
    wanted = list(uuids)
    for start in range(0, len(wanted), 1000):
        for row in connection.execute(select(
                table.c.uuid, table.c.flavor, table.c.project_id, table.c.user_id,
                table.c.availability_zone).where(table.c.uuid.in_(wanted[start:start + 1000]))):
            found[row.uuid] = {"flavor": row.flavor or {}, "project_id": row.project_id,
                               "user_id": row.user_id,
                               "availability_zone": row.availability_zone}
    return found
