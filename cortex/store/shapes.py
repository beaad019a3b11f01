"""Request shapes live calls brought, kept so that fresh workers warm with them.

A *shape* is the scheduler's own notion of what makes two requests alike: the pipeline
and what each of its steps' kept answers depend on (:meth:`cortex.plugins.base.Plugin.memo_key`),
so that two calls of one shape are answered from the same kept step answers
(:mod:`cortex.pipeline.memo`). The first time a worker meets a shape,
:class:`ShapeLog` hands the call's body, without its ``hosts`` and ``weights``, to
:class:`ShapeStore` on a background thread (the call does not wait); the store keeps
the newest ``keep`` shapes in ``request_shapes``. A fresh worker replays the newest
ones before it serves (:mod:`cortex.services.warmup`).

A shape's ``id`` is a digest of the key's ``repr``; keys holding sets may print their
items in another order in another process, so two workers can store one shape twice:
the warm-up then replays it twice, the second time from the kept answers.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, delete, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError

from cortex.db.models import RequestShape

LOG = logging.getLogger(__name__)
#: Shapes kept in ``request_shapes``; older ones are pruned by each write.
KEEP = 200


def shape_key(pipeline: Any, request: Any) -> Hashable:
    """The shape of ``request`` under ``pipeline``: its name, service and steps' memo keys."""
    steps = (*pipeline.filters, *pipeline.weighers)
    return (request.service, pipeline.name,
            tuple(step.plugin.memo_key(request) for step in steps))


def shape_id(key: Hashable) -> str:
    """The stored id of a shape: a SHA-256 hex digest of its ``repr``."""
    return hashlib.sha256(repr(key).encode()).hexdigest()


def stored_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """The body as stored: everything but the candidates (``hosts``) and ``weights``."""
    return {k: v for k, v in body.items() if k not in ("hosts", "weights")}


class ShapeStore:
    """``request_shapes``: the newest shapes' bodies (SQLite or PostgreSQL)."""

    def __init__(self, engine: Engine, keep: int = KEEP) -> None:
        self._engine = engine
        self.keep = keep

    def save(self, key_id: str, service: str, body: Mapping[str, Any],
             now: datetime | None = None) -> None:
        """Insert or refresh one shape, then prune to the newest ``keep``.

        Raises SQLAlchemyError when the database refuses or is down.
        """
        values = {"id": key_id, "service": service, "last_seen": now or datetime.now(UTC),
                  "body": stored_body(body)}
        with self._engine.begin() as connection:
            dialect = postgresql if connection.dialect.name == "postgresql" else sqlite
            statement = dialect.insert(RequestShape).values(values)
            connection.execute(statement.on_conflict_do_update(
                index_elements=[RequestShape.id],
                set_={"last_seen": values["last_seen"], "body": values["body"]}))
            newest = select(RequestShape.id).order_by(RequestShape.last_seen.desc()) \
                .limit(self.keep).scalar_subquery()
            connection.execute(delete(RequestShape).where(RequestShape.id.not_in(newest)))

    def newest(self, limit: int) -> list[tuple[str, dict[str, Any]]]:
        """``[(service, body)]`` of the ``limit`` newest shapes, newest first."""
        with self._engine.connect() as connection:
            rows = connection.execute(
                select(RequestShape.service, RequestShape.body)
                .order_by(RequestShape.last_seen.desc()).limit(limit)).all()
        return [(service, dict(body)) for service, body in rows]


class ShapeLog:
    """The shapes one worker has met (at most ``size``), new ones handed to the store.

    ``pipelines``: the worker's PipelineSet, which names the pipeline a decision ran.
    Without a store the log keeps nothing (recording is off). Thread-safe; the store's
    writes run one at a time on a background thread, and one that fails is logged and
    dropped (the shape stays met: it is not retried).
    """

    def __init__(self, store: ShapeStore | None, pipelines: Any = None,
                 size: int = 4096) -> None:
        self.store = store
        self.pipelines = pipelines
        self.size = size
        self._met: OrderedDict[Hashable, None] = OrderedDict()
        self._lock = threading.Lock()
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="cortex-shapes") \
            if store is not None else None

    def _key(self, request: Any, pipeline_name: str | None) -> Hashable | None:
        """The shape of ``request`` under the named pipeline; None when not recording."""
        if self.store is None or self.pipelines is None:
            return None
        pipeline = self.pipelines.pipelines.get(pipeline_name)
        return shape_key(pipeline, request) if pipeline is not None else None

    def remember(self, request: Any, pipeline_name: str | None) -> bool:
        """Mark the request's shape met; whether it is new to this worker."""
        key = self._key(request, pipeline_name)
        return key is not None and self._met_first(key)

    def _met_first(self, key: Hashable) -> bool:
        """Mark ``key`` met; whether it was new."""
        with self._lock:
            if key in self._met:
                self._met.move_to_end(key)
                return False
            self._met[key] = None
            if len(self._met) > self.size:
                self._met.popitem(last=False)
            return True

    def meet(self, request: Any, pipeline_name: str | None, body: Mapping[str, Any]) -> None:
        """Store ``body`` when the shape of its ``request`` is new to this worker.

        ``request`` was parsed from ``body`` and run by the pipeline named.
        """
        key = self._key(request, pipeline_name)
        if key is not None and self._met_first(key):
            self._writer.submit(self._save, shape_id(key), request.service, body)

    def _save(self, key_id: str, service: str, body: Mapping[str, Any]) -> None:
        try:
            self.store.save(key_id, service, body)
        except SQLAlchemyError as exc:
            LOG.warning("request shape %s not stored: %s", key_id[:12], type(exc).__name__)

    def close(self) -> None:
        """Wait for the writes handed over so far."""
        if self._writer is not None:
            self._writer.shutdown(wait=True)
