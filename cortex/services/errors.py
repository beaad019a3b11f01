"""The database's failures as a handler answers them, without the handler knowing SQL.

:func:`database_reads` turns any SQLAlchemy error inside it into
:class:`DatabaseUnreachable`, whose message is the error's class name (what a 503
names); :data:`DATABASE_ERRORS` are those the API answers with its own short 503
wherever they surface.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.exc import OperationalError, SQLAlchemyError

from cortex.db import guard

#: Errors that mean "the database failed or did not answer", answered 503 without a trace.
DATABASE_ERRORS = (guard.DatabaseUnavailable, OperationalError)


class DatabaseUnreachable(RuntimeError):
    """The database failed or could not be reached; the message is the error's class name."""


@contextmanager
def database_reads() -> Iterator[None]:
    """Raise :class:`DatabaseUnreachable` for a SQLAlchemy error inside."""
    try:
        yield
    except SQLAlchemyError as exc:
        raise DatabaseUnreachable(type(exc).__name__) from None
