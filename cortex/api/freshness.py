"""The API's bound on database waits, and its answer when the database fails.

Every request runs inside a :func:`cortex.db.guard.deadline` of ``[database]
request_timeout`` seconds (:func:`bound_database_waits`), and a database that failed or
did not answer in time is a short 503 (:func:`database_unavailable`). What the
healthcheck reports is :mod:`cortex.services.health`'s.
"""

from __future__ import annotations

import logging

from flask import Response, current_app, g

from cortex.api.errors import error_response
from cortex.db import guard
from cortex.services.errors import DATABASE_ERRORS

__all__ = ["DATABASE_ERRORS", "bound_database_waits", "database_unavailable",
           "end_database_waits"]

LOG = logging.getLogger(__name__)


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
