"""The worker's health as the healthcheck and the metrics tell it: knowledge and sync ages.

:func:`knowledge_health` says what ``GET /healthcheck`` answers (exactly when the
external endpoints answer 503 for want of knowledge), :func:`healthcheck_detail` the
per-source sync ages of ``?detail=1``, :func:`sync_ages` the ages
``cortex_knowledge_age_seconds`` exports. Every database wait is bounded.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from cortex.db import guard
from cortex.knowledge.cache import KnowledgeCache, KnowledgeUnavailable
from cortex.knowledge.freshness import source_freshness

LOG = logging.getLogger(__name__)
#: Seconds a scrape or a detailed healthcheck waits for the sync status table.
STATUS_TIMEOUT = 2.0


def knowledge_health(knowledge: KnowledgeCache, timeout: float) -> tuple[int, str, str | None]:
    """``(status, text, degraded)`` of ``GET /healthcheck``: what the external endpoints do.

    ``(503, "knowledge unavailable: <why>", None)`` when :meth:`KnowledgeCache.view`
    raises, exactly as the external endpoints then answer 503; else ``(200, "OK",
    degraded)``, ``degraded`` None, or, while the database is unreachable and the
    endpoints answer from the last view, ``"database unreachable: ...; answering from
    knowledge 12 s old, limit 300 s"`` (the ``X-Cortex-Degraded`` header). Any
    database wait (a foreground check) is bounded by ``timeout`` s
    (:func:`cortex.db.guard.deadline`); the background checker answers from memory.
    Rule: the caller contract wants a fast non-2xx exactly when we cannot help, and a
    load balancer must see what the callers see.
    """
    with guard.deadline(timeout):
        try:
            knowledge.view()
        except KnowledgeUnavailable as exc:
            return 503, f"knowledge unavailable: {exc}", None
    down = knowledge.database_down
    if down:
        age, limit = knowledge.age() or 0.0, knowledge.max_age
        return 200, "OK", (f"{down}; answering from knowledge {age:.0f} s old, "
                           f"limit {f'{limit:g} s' if limit else 'none'}")
    return 200, "OK", None


def sync_ages(engine: Engine) -> list[tuple[str, float]]:
    """``[(source, seconds since its last successful sync)]`` from ``sync_status``.

    A source that never succeeded is left out; when the database does not answer, the
    list is empty (the healthcheck says why); the query waits at most
    :data:`STATUS_TIMEOUT` s (not at all while the database is marked down). Read at
    scrape time by the API's knowledge collector as
    ``cortex_knowledge_age_seconds{source}``.
    """
    try:
        with guard.deadline(STATUS_TIMEOUT):
            return [(entry.source, entry.age_seconds) for entry in source_freshness(engine)
                    if entry.age_seconds is not None]
    except SQLAlchemyError as exc:
        LOG.warning("knowledge age: database unreachable (%s)", type(exc).__name__)
        return []


def healthcheck_detail(engine: Engine, knowledge: KnowledgeCache) -> dict[str, Any]:
    """The body of ``GET /healthcheck?detail=1``: the view's version, each source's age.

    ``{"status": "OK", "knowledge_version": 7, "sources": {"placement": {"age_seconds":
    12.5, "last_success_at": "...", "last_error": null, "consecutive_failures": 0}}}``;
    called once the plain check passed. The sources are read within
    :data:`STATUS_TIMEOUT` s; when the database does not answer, ``sources`` is empty
    and ``database`` says why (``"database": "unreachable: DatabaseUnavailable"``).
    """
    try:
        version = knowledge.view().version
    except KnowledgeUnavailable:
        version = None
    try:
        with guard.deadline(STATUS_TIMEOUT):
            sources = {entry.source: entry.as_dict() for entry in source_freshness(engine)}
        database = "OK"
    except SQLAlchemyError as exc:
        sources, database = {}, f"unreachable: {type(exc).__name__}"
    return {"status": "OK", "knowledge_version": version, "database": database,
            "sources": sources}
