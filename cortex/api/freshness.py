"""Knowledge age per sync source: the healthcheck detail and cortex_knowledge_age_seconds."""

from __future__ import annotations

import logging
from collections.abc import Iterator

from flask import jsonify
from prometheus_client.core import GaugeMetricFamily
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from cortex.knowledge.cache import KnowledgeCache, KnowledgeUnavailable
from cortex.knowledge.freshness import source_freshness

LOG = logging.getLogger(__name__)


class KnowledgeAgeCollector:
    """Collects ``cortex_knowledge_age_seconds{source}`` at scrape time from ``sync_status``.

    A source that never succeeded is left out; when the database does not answer,
    the metric is left out of that scrape (the healthcheck says why).
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """One gauge family with a sample per source."""
        family = GaugeMetricFamily("cortex_knowledge_age_seconds",
                                   "Seconds since the last successful sync of each source.",
                                   labels=["source"])
        try:
            for entry in source_freshness(self._engine):
                if entry.age_seconds is not None:
                    family.add_metric([entry.source], entry.age_seconds)
        except SQLAlchemyError as exc:
            LOG.warning("knowledge age: database unreachable (%s)", type(exc).__name__)
            return
        yield family


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
