"""Knowledge age per sync source: the healthcheck detail and cortex_knowledge_age_seconds.

Also the API's bound on database waits: every request runs inside a
:func:`cortex.db.guard.deadline` of ``[database] request_timeout`` seconds
(:func:`bound_database_waits`), and a database that failed or did not answer in time
is a short 503 (:func:`database_unavailable`).
"""

from __future__ import annotations

import logging

from flask import Response, current_app, g, jsonify
from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from cortex.api.errors import error_response
from cortex.db import guard
from cortex.knowledge.cache import KnowledgeCache, KnowledgeUnavailable
from cortex.knowledge.freshness import source_freshness

LOG = logging.getLogger(__name__)
#: Seconds a scrape or a detailed healthcheck waits for the sync status table.
STATUS_TIMEOUT = 2.0
#: Errors that mean "the database failed or did not answer", answered 503 without a trace.
DATABASE_ERRORS = (guard.DatabaseUnavailable, OperationalError)


def bound_database_waits() -> None:
    """``before_request``: the request's database waits end in ``request_timeout`` s.

    ``[database] request_timeout`` from now; the scheduling calls and the healthcheck
    bound theirs more tightly inside it.
    """
    timeout = current_app.extensions["cortex"].conf.get("database", "request_timeout")
    g.database_waits = guard.enter(timeout)


def end_database_waits(_exc: BaseException | None = None) -> None:
    """``teardown_request``: restore the thread's deadline as it was before the request."""
    if "database_waits" in g:
        guard.leave(g.pop("database_waits"))


def database_unavailable(exc: Exception) -> Response:
    """A database that failed or did not answer within the request's time: a short 503.

    Logged as one line, without a stack trace (the contract's reaction to an internal
    failure: a fast non-2xx the caller can act on).
    """
    LOG.warning("database unavailable: %s", str(exc).splitlines()[0][:300])
    return error_response(503, f"database unavailable ({type(exc).__name__}); "
                               "try again shortly", code="cortex.database_unavailable")


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


def healthcheck_detail(engine: Engine, knowledge: KnowledgeCache):
    """``GET /healthcheck?detail=1``: the view's version and, per sync source, its age.

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
    return jsonify(status="OK", knowledge_version=version, database=database, sources=sources)
