"""What the scheduler and the descheduler did, as the dashboard reads it.

:func:`decision_timeline` counts the recorded decisions per bucket
(:func:`cortex.store.timeline.decision_timeline`, grouped in SQL);
:func:`refusals_by_cause` counts the calls that found no host by their cause
(:func:`cortex.store.decisions.refusals_by_cause`); :func:`recent_moves` lists
cortex-descheduler's latest moves (:func:`cortex.store.moves.list_moves`). A database
failure propagates as the store raises it: the API answers it with its short 503.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from cortex.store.decisions import refusals_by_cause as _refusals
from cortex.store.moves import list_moves
from cortex.store.timeline import MAX_HOURS, Timeline
from cortex.store.timeline import decision_timeline as _count

__all__ = ["MAX_HOURS", "REFUSAL_HOURS", "Timeline", "decision_timeline", "recent_moves",
           "refusals_by_cause"]

#: The window of the refusals by cause, in hours: the last day.
REFUSAL_HOURS = 24


def decision_timeline(engine: Any, hours: int, now: datetime, service: str | None = None,
                      pipeline: str | None = None) -> Timeline:
    """Decisions of the last ``hours`` (1..:data:`MAX_HOURS`) up to ``now``, per bucket.

    ``service`` and ``pipeline`` (None: all) filter them.
    """
    with engine.connect() as connection:
        return _count(connection, hours, now, service=service, pipeline=pipeline)


def refusals_by_cause(engine: Any, now: datetime, hours: int = REFUSAL_HOURS,
                      service: str | None = None, pipeline: str | None = None
                      ) -> list[dict[str, Any]]:
    """Calls that found no host in the last ``hours`` up to ``now``, by service, pipeline, cause.

    ``[{"service", "pipeline", "cause", "count"}]``, most first; ``service`` and
    ``pipeline`` (None: all) filter them.
    """
    with engine.connect() as connection:
        return _refusals(connection, now - timedelta(hours=hours), now, service, pipeline)


def recent_moves(engine: Any, limit: int) -> tuple[list[dict[str, Any]], list[tuple[str, int]]]:
    """The newest ``limit`` descheduler moves, newest first, and how many are in each state.

    Returns ``(moves, [(state, count)])``, the states in name order.
    """
    with engine.connect() as connection:
        moves = list_moves(connection, limit)
    counts: dict[str, int] = {}
    for move in moves:
        counts[move["state"]] = counts.get(move["state"], 0) + 1
    return moves, sorted(counts.items())
