"""Knowledge age per sync source: the healthcheck detail and cortex_knowledge_age_seconds."""

from __future__ import annotations

import logging

from flask import jsonify
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from cortex.knowledge.cache import KnowledgeCache, KnowledgeUnavailable
from cortex.knowledge.freshness import source_freshness

LOG = logging.getLogger(__name__)


def sync_ages(engine: Engine) -> list[tuple[str, float]]:
    """``[(source, seconds since its last successful sync)]`` from ``sync_status``.

    A source that never succeeded is left out; when the database does not answer, the
    list is empty (the healthcheck says why). Read at scrape time by the API's
    knowledge collector as ``cortex_knowledge_age_seconds{source}``.
    """
    try:
        return [(entry.source, entry.age_seconds) for entry in source_freshness(engine)
                if entry.age_seconds is not None]
    except SQLAlchemyError as exc:
        LOG.warning("knowledge age: database unreachable (%s)", type(exc).__name__)
        return []


def healthcheck_detail(engine: Engine, knowledge: KnowledgeCache):
    """``GET /healthcheck?detail=1``: the view's version and, per sync source, its age.

    ``{"status": "OK", "knowledge_version": 7, "sources": {"placement": {"age_seconds":
    12.5, "last_success_at": "...", "last_error": null, "consecutive_failures": 0}}}``;
    called once the database answered the plain check.
    """
    try:
        version = knowledge.view().version
    except KnowledgeUnavailable:
        version = None
    sources = {entry.source: entry.as_dict() for entry in source_freshness(engine)}
    return jsonify(status="OK", knowledge_version=version, sources=sources)
