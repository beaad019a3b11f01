"""How old the knowledge is, per sync source (``sync_status``), for the API's health and metrics."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Engine, select

from cortex.db import models


@dataclass(frozen=True)
class SourceFreshness:
    """One sync source: seconds since its last success (None: never), its last error."""

    source: str
    age_seconds: float | None
    last_success_at: datetime | None
    last_error: str | None
    consecutive_failures: int

    def as_dict(self) -> dict:
        """JSON-friendly form (times in ISO 8601)."""
        return {"age_seconds": self.age_seconds,
                "last_success_at": self.last_success_at.isoformat()
                if self.last_success_at else None,
                "last_error": self.last_error,
                "consecutive_failures": self.consecutive_failures}


def source_freshness(engine: Engine, now: datetime | None = None) -> list[SourceFreshness]:
    """Every source that ever ran, by name; raises SQLAlchemyError when the database fails."""
    now = now or datetime.now(UTC)
    table = models.SyncStatus.__table__
    with engine.connect() as connection:
        rows = connection.execute(select(
            table.c.source, table.c.last_success_at, table.c.last_error,
            table.c.consecutive_failures).order_by(table.c.source)).all()
    found = []
    for source, success, error, failures in rows:
        if success is not None and success.tzinfo is None:
            success = success.replace(tzinfo=UTC)
        age = max(0.0, (now - success).total_seconds()) if success else None
        found.append(SourceFreshness(source, age, success, error if failures else None,
                                     failures))
    return found
