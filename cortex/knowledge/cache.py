"""Per-worker cache of the knowledge view, rebuilt only when the version moves."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from cortex.knowledge.loader import load_view, read_version
from cortex.knowledge.view import KnowledgeView

LOG = logging.getLogger(__name__)


class KnowledgeUnavailable(RuntimeError):
    """No knowledge view could be loaded; the message says why (answered with 503)."""


class KnowledgeCache:
    """Holds the current KnowledgeView; checks the version at most every ``interval`` s.

    ``view()`` is cheap on the hot path: a clock read, and at most once per interval
    one ``SELECT version``; the full reload runs only when the version changed. When
    the database fails, the last good view keeps serving and ``last_error`` says why;
    with no view at all, ``view()`` raises KnowledgeUnavailable.
    """

    def __init__(self, engine: Engine, interval: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._engine = engine
        self._interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._view: KnowledgeView | None = None
        self._checked_at = float("-inf")
        self.last_error: str | None = None

    def view(self) -> KnowledgeView:
        """The current view, refreshed if due; raises KnowledgeUnavailable if there is none."""
        if self._clock() - self._checked_at >= self._interval:
            self.refresh()
        if self._view is None:
            raise KnowledgeUnavailable(self.last_error or "knowledge not loaded")
        return self._view

    def refresh(self, force: bool = False) -> None:
        """Check the version now and reload when it moved (or when ``force``)."""
        with self._lock:
            if not force and self._clock() - self._checked_at < self._interval:
                return
            self._checked_at = self._clock()
            try:
                current = self._view
                if force or current is None or read_version(self._engine) != current.version:
                    self._view = load_view(self._engine, previous=current)
                    LOG.info("knowledge view loaded: version %d, %d hosts",
                             self._view.version, len(self._view.hosts))
                self.last_error = None
            except SQLAlchemyError as exc:
                self.last_error = f"database unreachable: {type(exc).__name__}"
                LOG.warning("knowledge refresh failed: %s", exc.__class__.__name__)
