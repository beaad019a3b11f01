"""GPU demand as the decision log keeps it (``gpu_demand``), and the latest forecasts.

The decision writer (:class:`cortex.store.decisions.DecisionWriter`) inserts one
``gpu_demand`` row per decision that carries ``demand``, in the same transaction as the
decision. :class:`DemandStore` reads it back as hourly sums per GPU model and
availability zone, the forecasts' input, and applies its own retention
(``[forecast] demand_retention_days``, longer than the decision log's).
:class:`ForecastStore` keeps the latest forecasts (``gpu_forecasts``), replaced whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, delete, func, insert, select

from cortex.db.models import GpuDemand, GpuForecast
from cortex.decision import Decision

#: Outcomes of a demand row.
DEMAND_OUTCOMES = ("placed", "refused")


@contextmanager
def _connected(bind: Engine | Connection, write: bool = False) -> Iterator[Connection]:
    """``bind`` itself when a connection (its transaction is the caller's), else one of it."""
    if isinstance(bind, Connection):
        yield bind
    elif write:
        with bind.begin() as connection:
            yield connection
    else:
        with bind.connect() as connection:
            yield connection


def demand_row(decision: Decision) -> dict[str, Any] | None:
    """The ``gpu_demand`` row of a recorded decision, None when it carries no demand."""
    demand = decision.demand
    if demand is None or decision.id is None or decision.created_at is None:
        return None
    return {"decision_id": decision.id, "created_at": decision.created_at,
            "service": decision.service, "model": str(demand.get("model") or "any"),
            "model_named": bool(demand.get("model_named")),
            "flavor": demand.get("flavor"), "availability_zone": demand.get("availability_zone"),
            "gpus": int(demand.get("gpus") or 0), "vgpus": int(demand.get("vgpus") or 0),
            "instances": max(1, int(demand.get("instances") or 1)),
            "outcome": demand.get("outcome") or "placed", "host": demand.get("host"),
            "power_delta_watts": demand.get("power_delta_watts")}


#: What :meth:`DemandStore.hourly` can sum by, besides the zone.
DEMAND_GROUPS = ("model", "flavor")


@dataclass(frozen=True)
class HourlyDemand:
    """Whole GPUs asked in one hour for one model (or flavor) and zone, placed and refused.

    ``model`` is the GPU model, or with ``by="flavor"`` the flavor's name (empty when the
    request carried none).
    """

    hour: datetime
    model: str
    availability_zone: str | None
    placed: int
    refused: int


class DemandStore:
    """Reads and prunes ``gpu_demand``; writes rows for imports and generated history."""

    def __init__(self, bind: Engine | Connection) -> None:
        self._bind = bind

    def add(self, rows: Iterable[Mapping[str, Any]], batch: int = 5000) -> int:
        """Insert ``rows`` (``gpu_demand`` column dicts) in batches; returns how many."""
        count, chunk = 0, []
        with _connected(self._bind, write=True) as connection:
            for row in rows:
                chunk.append(dict(row))
                if len(chunk) >= batch:
                    connection.execute(insert(GpuDemand), chunk)
                    count, chunk = count + len(chunk), []
            if chunk:
                connection.execute(insert(GpuDemand), chunk)
                count += len(chunk)
        return count

    def hourly(self, since: datetime, until: datetime, by: str = "model"
               ) -> list[HourlyDemand]:
        """Whole GPUs asked per hour, model (or flavor) and zone in ``[since, until)``.

        Summed in the database (``date_trunc`` on PostgreSQL, ``strftime`` on SQLite), so
        the rows read are one per hour, group, zone and outcome, not one per decision.
        Hours without demand are absent. ``hour`` is timezone-aware UTC. ``by``: one of
        :data:`DEMAND_GROUPS`; ValueError otherwise.
        """
        if by not in DEMAND_GROUPS:
            raise ValueError(f"demand is summed by {' or '.join(DEMAND_GROUPS)}, not {by!r}")
        group = GpuDemand.model if by == "model" else GpuDemand.flavor
        dialect = self._bind.dialect.name
        if dialect == "postgresql":
            hour = func.date_trunc("hour", func.timezone("UTC", GpuDemand.created_at))
        else:
            hour = func.strftime("%Y-%m-%d %H:00:00", GpuDemand.created_at)
        query = (select(hour.label("hour"), group, GpuDemand.availability_zone,
                        GpuDemand.outcome, func.sum(GpuDemand.gpus))
                 .where(GpuDemand.created_at >= since, GpuDemand.created_at < until,
                        GpuDemand.gpus > 0)
                 .group_by(hour, group, GpuDemand.availability_zone, GpuDemand.outcome)
                 .order_by(hour))
        sums: dict[tuple, list[int]] = {}
        with _connected(self._bind) as connection:
            for at, model, zone, outcome, gpus in connection.execute(query):
                if isinstance(at, str):
                    at = datetime.fromisoformat(at)
                at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
                entry = sums.setdefault((at, model or "", zone), [0, 0])
                entry[0 if outcome == "placed" else 1] += int(gpus or 0)
        return [HourlyDemand(at, model, zone, placed, refused)
                for (at, model, zone), (placed, refused) in sums.items()]

    def first(self) -> datetime | None:
        """When the oldest kept demand row was written (UTC), None when there is none."""
        with _connected(self._bind) as connection:
            at = connection.execute(select(func.min(GpuDemand.created_at))).scalar_one()
        if at is None:
            return None
        return at.replace(tzinfo=UTC) if at.tzinfo is None else at

    def prune(self, older_than_days: float, now: datetime | None = None) -> int:
        """Delete demand older than ``older_than_days``; returns how many rows."""
        cutoff = (now or datetime.now(UTC)) - timedelta(days=older_than_days)
        with _connected(self._bind, write=True) as connection:
            return connection.execute(
                delete(GpuDemand).where(GpuDemand.created_at < cutoff)).rowcount


def without_series(document: Mapping[str, Any]) -> dict[str, Any]:
    """A forecast document without its hourly ``history`` and ``points``."""
    return {k: v for k, v in document.items() if k not in ("history", "points")}


class ForecastStore:
    """The latest forecasts (``gpu_forecasts``): replaced whole, read as documents."""

    def __init__(self, bind: Engine | Connection) -> None:
        self._bind = bind

    def replace(self, forecasts: Sequence[Mapping[str, Any]]) -> None:
        """Replace every stored forecast with ``forecasts`` in one transaction.

        Each is a forecast document (:func:`cortex.forecast.plan.forecast_documents`):
        ``computed_at`` (ISO 8601), ``model``, ``availability_zone``, ``horizon_hours``,
        ``supply_gpus``, ``used_gpus``, ``days_to_exhaustion``,
        ``days_to_exhaustion_pessimistic``, ``method`` and the rest, kept whole.
        """
        rows = [{"computed_at": datetime.fromisoformat(f["computed_at"]), "model": f["model"],
                 "availability_zone": f["availability_zone"],
                 "flavor_family": f.get("flavor_family"),
                 "horizon_hours": f["horizon_hours"], "supply_gpus": f["supply_gpus"],
                 "used_gpus": f["used_gpus"], "days_to_exhaustion": f["days_to_exhaustion"],
                 "days_to_exhaustion_pessimistic": f["days_to_exhaustion_pessimistic"],
                 "method": f["method"], "document": dict(f)} for f in forecasts]
        with _connected(self._bind, write=True) as connection:
            connection.execute(delete(GpuForecast))
            if rows:
                connection.execute(insert(GpuForecast), rows)

    def latest(self) -> list[dict[str, Any]]:
        """The stored forecast documents: GPU models, then flavor families; by zone."""
        with _connected(self._bind) as connection:
            rows = connection.execute(select(GpuForecast.document)).scalars().all()
        return sorted((dict(r) for r in rows),
                      key=lambda d: (d.get("flavor_family") is not None,
                                     d.get("flavor_family") or "", d["model"],
                                     d["availability_zone"] or ""))
