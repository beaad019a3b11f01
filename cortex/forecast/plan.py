"""Per GPU model and zone: the demand forecast, GPUs in use projected, days to exhaustion.

Demand is whole GPUs asked per hour by creates, placed and refused (the decision log's
``gpu_demand``); supply is the knowledge's (:func:`cortex.forecast.supply.gpu_supply`).
The decision log records arrivals, not departures, so the GPUs in use are projected
with Little's law (L = lambda W): the mean time a GPU stays held is estimated as
``W = used now / GPUs placed per hour`` over the last week, and each hour
``in_use(h + 1) = in_use(h) * (1 - 1 / W) + demand(h)`` (a fluid M/G/inf queue: in
steady state the GPUs in use stay where they are; growth and refusals push them up).
The days to exhaustion are when the projection first reaches the supply (0 when it
already has; None when not within the horizon). The pessimistic days and the upper
band of the GPUs in use come from simulated futures of the fitted model
(``ForecastSettings.paths``): the hourly interval bounds are marginal, and summing
them would be far too pessimistic over two weeks. The pessimistic days are the
``(1 - coverage) / 2`` quantile of the paths' exhaustion times (a path that never
runs out counts as never).

Flavor families (``g5`` of ``g5.2xlarge``) get forecasts of their demand: a family has
no GPUs of its own, but each of its flavors has a placeable supply, the instances of
it that still fit (``placeable_now``, :mod:`cortex.services.capacity`: placed one after
the other through the flavor's pipeline, so 28 free GPUs spread over boards count as
the 8-GPU instances they really hold). :func:`against_placeable` turns a family's
forecast into days to exhaustion per flavor: the family's forecast GPUs per hour, split
by each flavor's share of the family's GPUs asked over the last week, in instances
(the flavor's GPUs per instance), less the instances leaving at the pace the flavor
placed them over that week (the steady state of the Little's-law projection above:
GPUs leave as fast as they were placed); the flavor runs out when what is left of that
growth fills its ``placeable_now``. It is computed where the placeable counts are, from
the family documents' ``flavors`` (:func:`forecast_documents`), with no second fit.

Each (model, zone) that has supply or demand gets a forecast, and each model one over
all zones (``availability_zone`` None: demand that named no zone counts there, with
every zone's GPUs as supply). Refused demand counts as demand: a cloud refusing GPU
requests is out of GPUs already.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from cortex.forecast import model
from cortex.forecast.supply import Supply
from cortex.knowledge.gpu_names import ANY_MODEL
from cortex.store.demand import HourlyDemand

HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class ForecastSettings:
    """``horizon`` and ``history`` in hours; ``coverage``: the interval's probability.

    ``backtest_folds``: rolling origins of the backtest (0: none); ``series_hours``: the
    hours of history a document carries for charts; ``paths``: simulated futures for the
    pessimistic side (at least 20); ``seed`` seeds them; ``family_separators``: the
    characters that end a flavor family's name (:func:`flavor_family`).
    """

    horizon: int = 14 * 24
    history: int = 90 * 24
    coverage: float = 0.8
    backtest_folds: int = 4
    series_hours: int = 14 * 24
    paths: int = 200
    seed: int = 0
    family_separators: str = "."

    def __post_init__(self) -> None:
        """Horizon and history of at least an hour; coverage in (0, 1); folds >= 0."""
        if self.paths < 20:
            raise ValueError("paths must be at least 20")
        if self.horizon < 1 or self.history < 1:
            raise ValueError("horizon and history must be at least one hour")
        if not 0 < self.coverage < 1:
            raise ValueError("coverage must be between 0 and 1")
        if self.backtest_folds < 0:
            raise ValueError("backtest_folds must be >= 0")


def hour_floor(at: datetime) -> datetime:
    """``at`` (UTC) cut down to its hour."""
    return at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def demand_series(rows: Sequence[HourlyDemand], since: datetime, hours: int
                  ) -> dict[tuple[str, str | None], tuple[np.ndarray, np.ndarray]]:
    """``{(model, zone): (asked, placed)}``: GPUs per hour from ``since``, ``hours`` long.

    Every row counts for its own zone and for its model over all zones (zone None).
    Rows outside the grid are ignored.
    """
    series: dict[tuple[str, str | None], tuple[np.ndarray, np.ndarray]] = {}
    for row in rows:
        slot = int((row.hour - since) / HOUR)
        if not 0 <= slot < hours:
            continue
        for key in {(row.model, row.availability_zone), (row.model, None)}:
            asked, placed = series.setdefault(key, (np.zeros(hours), np.zeros(hours)))
            asked[slot] += row.placed + row.refused
            placed[slot] += row.placed
    return series


def project_in_use(used: float, placed_per_hour: float, demand: np.ndarray) -> np.ndarray:
    """GPUs in use after each forecast hour (module docstring: Little's law).

    ``used``: GPUs held now; ``placed_per_hour``: the recent rate of GPUs placed, whose
    ratio gives the mean holding time (no departures when nothing was placed);
    ``demand``: GPUs asked per hour, shape ``(hours,)`` or ``(paths, hours)``; the
    answer has its shape.
    """
    leave = min(1.0, placed_per_hour / used) if used > 0 else (1.0 if placed_per_hour else 0.0)
    demand = np.asarray(demand, dtype=float)
    in_use = np.empty_like(demand)
    level = np.full(demand.shape[:-1], float(used))
    for hour in range(demand.shape[-1]):
        level = level * (1 - leave) + demand[..., hour]
        in_use[..., hour] = level
    return in_use


def exhaustion_hours(used: float, supply: int, in_use: np.ndarray) -> np.ndarray:
    """Hours until ``in_use`` (``(..., hours)``) first reaches ``supply``; inf if never.

    0 when ``used`` already has (or there is no supply).
    """
    in_use = np.asarray(in_use, dtype=float)
    if supply <= 0 or used >= supply:
        return np.zeros(in_use.shape[:-1])
    reached = in_use >= supply
    first = np.argmax(reached, axis=-1).astype(float) + 1
    return np.where(reached.any(axis=-1), first, np.inf)


def _days(hours: float) -> float | None:
    """Hours as days (two decimals), None for never."""
    return None if not np.isfinite(hours) else round(float(hours) / 24, 2)


def flavor_family(name: str | None, separators: str = ".") -> str:
    """The family of a flavor: its name up to the first of ``separators``.

    ``g5.2xlarge`` is family ``g5`` with the default ``.``; a name without a separator is
    its own family; a request without a flavor name counts as family ``-``.
    """
    if not name:
        return "-"
    cut = min((i for i in (name.find(c) for c in separators) if i > 0), default=len(name))
    return name[:cut]


def forecast_documents(rows: Sequence[HourlyDemand],
                       supply: dict[tuple[str, str | None], Supply], now: datetime,
                       settings: ForecastSettings = ForecastSettings(),
                       first: datetime | None = None,
                       flavor_rows: Sequence[HourlyDemand] = ()) -> list[dict[str, Any]]:
    """One forecast document per (model, zone) with supply or demand, by model and zone.

    ``rows``: hourly demand per GPU model (:meth:`cortex.store.demand.DemandStore.hourly`)
    of the last ``settings.history`` hours before ``now``'s hour; ``first``: when the
    oldest kept demand was written (the series start no earlier: hours before it are
    unknown, not zero). ``flavor_rows``: the same per flavor name (``by="flavor"``); each
    flavor family (:func:`flavor_family` with ``settings.family_separators``) then gets
    documents of its own after the models', of demand alone (``flavor_family`` set,
    ``model`` ``any``, supply, GPUs in use and days to exhaustion None), each with
    ``flavors``: ``[{"flavor", "asked_gpus_per_day", "placed_gpus_per_day"}]``, the
    family's flavors asked in that zone over the last week, by name (what
    :func:`against_placeable` splits the family's forecast by).

    A document: ``computed_at``, ``model``, ``flavor_family`` (None for a model),
    ``availability_zone``, ``horizon_hours``, ``supply_gpus``, ``used_gpus``,
    ``free_gpus``, ``days_to_exhaustion``, ``days_to_exhaustion_pessimistic``, ``method``,
    ``coverage``, ``history_hours`` (hours fitted on), ``demand_gpus_per_day`` (last
    week's mean), ``forecast_gpus_per_day`` (the horizon's mean), ``holding_hours`` (W,
    None when unknown), ``backtest`` (:meth:`cortex.forecast.model.Backtest.as_dict` or
    None), ``history`` (``[{"at", "gpus"}]`` hourly, the last ``series_hours``) and
    ``points`` (``[{"at", "gpus", "lower", "upper", "in_use", "in_use_pessimistic"}]``
    hourly).
    """
    end = hour_floor(now)
    since = end - settings.history * HOUR
    if first is not None and hour_floor(first) > since:
        since = hour_floor(first)
    hours = max(0, int((end - since) / HOUR))
    series = demand_series(rows, since, hours)
    keys = set(series) | {k for k in supply if k[0] != ANY_MODEL}
    computed = now.astimezone(UTC).isoformat()
    window = (since, end, settings, computed)
    documents: list[dict[str, Any]] = []
    fits: dict[bytes, tuple[Any, Any]] = {}  # one fit per distinct demand series
    for key in sorted(keys, key=lambda k: (k[0], k[1] or "")):
        asked, placed = series.get(key, (np.zeros(hours), np.zeros(hours)))
        documents.append(_document(key, asked, placed, supply.get(key, Supply()), *window,
                                   fits=fits))
    families = demand_series([replace(r, model=flavor_family(r.model,
                                                             settings.family_separators))
                              for r in flavor_rows], since, hours)
    by_flavor = demand_series(flavor_rows, since, hours)
    for (family, zone), (asked, placed) in sorted(families.items(),
                                                  key=lambda i: (i[0][0], i[0][1] or "")):
        document = _document((ANY_MODEL, zone), asked, placed, None, *window,
                             family=family, fits=fits)
        document["flavors"] = [
            {"flavor": name,
             "asked_gpus_per_day": round(float(f_asked[-model.WEEK:].mean()) * 24, 3),
             "placed_gpus_per_day": round(float(f_placed[-model.WEEK:].mean()) * 24, 3)}
            for (name, where), (f_asked, f_placed) in sorted(
                by_flavor.items(), key=lambda i: (i[0][0], i[0][1] or ""))
            if where == zone and len(f_asked)
            and flavor_family(name, settings.family_separators) == family]
        documents.append(document)
    return documents


@dataclass(frozen=True)
class FlavorSupply:
    """What each GPU flavor can still place: the input of :func:`against_placeable`.

    ``gpus``: whole GPUs an instance of each flavor is passed through (a flavor asking
    none, such as a vGPU one, is left out); ``placeable``: ``{(flavor, zone):
    instances}`` that fit now (``cortex_flavor_placeable_instances{state="now"}``).
    """

    gpus: Mapping[str, int] = field(default_factory=dict)
    placeable: Mapping[tuple[str, str], int] = field(default_factory=dict)

    def now(self, flavor: str, zone: str | None) -> int | None:
        """Instances of ``flavor`` that fit in ``zone`` (None: summed over every zone).

        None when the flavor was not counted there (not a synced GPU flavor).
        """
        if zone is not None:
            return self.placeable.get((flavor, zone))
        found = [n for (name, _), n in self.placeable.items() if name == flavor]
        return sum(found) if found else None


def against_placeable(document: Mapping[str, Any], supply: FlavorSupply) -> dict[str, Any]:
    """A flavor family's forecast document with its flavors' days to exhaustion added.

    ``document``: a family's document with its ``points`` and ``flavors``
    (:func:`forecast_documents`); a model's is answered unchanged (a copy). Adds
    ``placeable``: ``[{"flavor", "gpus", "placeable_now", "instances_per_day",
    "days_to_exhaustion"}]`` for each of its flavors (``gpus``, ``placeable_now`` and
    the rest None for a flavor ``supply`` does not count: not a synced GPU flavor), and
    ``placeable_days_to_exhaustion`` and ``placeable_flavor``: the soonest of them and
    its flavor (None when none runs out within the horizon). ``instances_per_day``:
    the flavor's forecast arrivals, the horizon's mean. Days: the module docstring;
    0 when nothing fits now, None when not within the horizon.
    """
    if document.get("flavor_family") is None:
        return dict(document)
    flavors = document.get("flavors") or []
    asked = sum(f["asked_gpus_per_day"] for f in flavors)
    gpus_ahead = np.array([p["gpus"] for p in document.get("points") or []], dtype=float)
    zone = document["availability_zone"]
    placeable: list[dict[str, Any]] = []
    soonest: tuple[float, str] | None = None
    for entry in flavors:
        name, per = entry["flavor"], supply.gpus.get(entry["flavor"])
        now = supply.now(name, zone) if per else None
        found: dict[str, Any] = {"flavor": name, "gpus": per, "placeable_now": now,
                                 "instances_per_day": None, "days_to_exhaustion": None}
        if per and now is not None:
            share = entry["asked_gpus_per_day"] / asked if asked else 0.0
            arriving = gpus_ahead * share / per
            leaving = entry["placed_gpus_per_day"] / 24 / per
            grown = np.cumsum(arriving - leaving)
            days = _days(float(exhaustion_hours(0, now, grown[None, :])[0])) \
                if len(grown) else None
            found |= {"instances_per_day": round(float(arriving.mean()) * 24, 3)
                      if len(arriving) else 0.0, "days_to_exhaustion": days}
            if days is not None and (soonest is None or days < soonest[0]):
                soonest = (days, name)
        placeable.append(found)
    return dict(document) | {
        "placeable": placeable,
        "placeable_days_to_exhaustion": soonest[0] if soonest else None,
        "placeable_flavor": soonest[1] if soonest else None}


def _document(key: tuple[str, str | None], asked: np.ndarray, placed: np.ndarray,
              supply: Supply | None, since: datetime, end: datetime,
              settings: ForecastSettings, computed: str,
              family: str | None = None,
              fits: dict[bytes, tuple[Any, Any]] | None = None) -> dict[str, Any]:
    """The forecast document of one (model, zone), or of a flavor family's demand alone.

    ``fits``: the forecasts and backtests of the demand series met so far, by the
    series' bytes: a model in one zone, its all-zone sum and its flavor family often
    ask the same GPUs hour by hour, and equal series give equal forecasts (the same
    seed). The backtest runs first; the forecast's fit starts from its parameters.
    """
    fits = {} if fits is None else fits
    found = fits.get(asked.tobytes())
    if found is None:
        check = (model.backtest(asked, since, folds=settings.backtest_folds,
                                coverage=settings.coverage)
                 if settings.backtest_folds else None)
        predicted = model.forecast(asked, since, settings.horizon, settings.coverage,
                                   settings.paths, settings.seed,
                                   start_params=check.params if check is not None else None)
        found = fits[asked.tobytes()] = (predicted, check)
    predicted, check = found
    recent = placed[-model.WEEK:]
    placed_rate = float(recent.mean()) if len(recent) else 0.0
    shown = asked[-settings.series_hours:]
    shown_from = end - len(shown) * HOUR
    ahead: dict[str, Any] = {"supply_gpus": None, "used_gpus": None, "free_gpus": None,
                             "days_to_exhaustion": None, "days_to_exhaustion_pessimistic": None,
                             "holding_hours": None}
    in_use = in_use_high = [None] * len(predicted.mean)
    if supply is not None:
        assert predicted.paths is not None
        projected = project_in_use(supply.used, placed_rate, predicted.mean)
        on_paths = project_in_use(supply.used, placed_rate, predicted.paths)
        early = float(np.quantile(exhaustion_hours(supply.used, supply.total, on_paths),
                                  0.5 - settings.coverage / 2, method="lower"))
        in_use = [round(float(u), 2) for u in projected]
        in_use_high = [round(float(u), 2) for u in
                       np.quantile(on_paths, 0.5 + settings.coverage / 2, axis=0)]
        ahead = {"supply_gpus": supply.total, "used_gpus": supply.used,
                 "free_gpus": supply.free,
                 "days_to_exhaustion": _days(float(exhaustion_hours(supply.used, supply.total,
                                                                    projected))),
                 "days_to_exhaustion_pessimistic": _days(early),
                 "holding_hours": round(supply.used / placed_rate, 1)
                 if placed_rate and supply.used else None}
    return {
        "computed_at": computed, "model": key[0], "flavor_family": family,
        "availability_zone": key[1], "horizon_hours": settings.horizon, **ahead,
        "method": predicted.method, "coverage": settings.coverage, "history_hours": len(asked),
        "demand_gpus_per_day": round(float(asked[-model.WEEK:].mean()) * 24, 2)
        if len(asked) else 0.0,
        "forecast_gpus_per_day": round(float(predicted.mean.mean()) * 24, 2),
        "backtest": check.as_dict() if check is not None else None,
        "history": [{"at": (shown_from + i * HOUR).isoformat(), "gpus": float(v)}
                    for i, v in enumerate(shown)],
        "points": [{"at": (end + i * HOUR).isoformat(), "gpus": round(float(m), 3),
                    "lower": round(float(lo), 3), "upper": round(float(hi), 3),
                    "in_use": u, "in_use_pessimistic": p}
                   for i, (m, lo, hi, u, p) in enumerate(zip(
                       predicted.mean, predicted.lower, predicted.upper, in_use, in_use_high,
                       strict=True))],
    }
