"""cortex-agent topology reports as the API takes and shows them (``/v1/topology/<host>``).

:func:`store` is the one write (:func:`cortex.store.reports.store_report` in one
transaction), :func:`show` the read (:func:`cortex.knowledge.reports.read_reports`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.exc import DataError

from cortex.knowledge.reports import read_reports
from cortex.services.errors import DatabaseUnreachable, database_reads
from cortex.store.reports import TopologyError, store_report

__all__ = ["DatabaseUnreachable", "TopologyError", "show", "store"]


def store(engine: Any, host: str, report: dict[str, Any], now: datetime) -> dict[str, Any]:
    """Store ``host``'s report (a checked ``TopologyReport``) as of ``now``; the stored document.

    Raises TopologyError for a report that is inconsistent or holds a value the database
    cannot store (a count beyond its column's range), DatabaseUnreachable.
    """
    with database_reads():
        try:
            with engine.begin() as connection:
                return store_report(connection, host, report, now)
        except DataError as exc:
            raise TopologyError(f"the report holds a value that cannot be stored: "
                                f"{str(exc.orig).splitlines()[0][:120]}") from None


def show(engine: Any, host: str) -> dict[str, Any] | None:
    """The stored report of ``host`` with ``reported_at`` (a datetime); None if none.

    Raises DatabaseUnreachable.
    """
    with database_reads(), engine.connect() as connection:
        return read_reports(connection, [host]).get(host)
