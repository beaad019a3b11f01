"""Compute the forecasts from the database: demand from the decision log, supply now.

Used by ``cortex-manage forecast`` and cortex-sync's ``forecast`` source; the API only
reads what they stored (:class:`cortex.store.demand.ForecastStore`).
"""

from __future__ import annotations

import importlib.util
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine

from cortex.conf import Config
from cortex.forecast.plan import HOUR, ForecastSettings, forecast_documents, hour_floor
from cortex.forecast.supply import gpu_supply
from cortex.knowledge.loader import load_view
from cortex.knowledge.view import KnowledgeView
from cortex.store.demand import DemandStore


def require_statsmodels() -> None:
    """Raise RuntimeError, saying how to install it, when statsmodels is missing."""
    if importlib.util.find_spec("statsmodels") is None:
        raise RuntimeError("forecasts need statsmodels: pip install 'cortex-scheduler[forecast]'")


def settings_from_conf(conf: Config, horizon_days: float | None = None) -> ForecastSettings:
    """The :class:`ForecastSettings` of ``[forecast]``; ``horizon_days`` overrides it."""
    horizon = horizon_days if horizon_days is not None else conf.get("forecast", "horizon_days")
    return ForecastSettings(horizon=max(1, round(horizon * 24)),
                            history=max(1, round(conf.get("forecast", "history_days") * 24)),
                            coverage=conf.get("forecast", "coverage"),
                            family_separators=conf.get("forecast",
                                                       "flavor_family_separators"))


def compute(bind: Engine | Connection, settings: ForecastSettings,
            now: datetime | None = None, view: KnowledgeView | None = None
            ) -> list[dict[str, Any]]:
    """The forecast documents (:func:`cortex.forecast.plan.forecast_documents`) now.

    ``view``: the knowledge to take the supply from (default: loaded from ``bind``).
    Raises RuntimeError without statsmodels; database errors propagate.
    """
    require_statsmodels()
    now = now or datetime.now(UTC)
    view = view if view is not None else load_view(bind)
    store = DemandStore(bind)
    end = hour_floor(now)
    since = end - settings.history * HOUR
    return forecast_documents(store.hourly(since, end), gpu_supply(view), now, settings,
                              store.first(), store.hourly(since, end, by="flavor"))


def seed_demo(engine: Engine, now: datetime | None = None) -> tuple[int, int | None]:
    """The demo's foresight: 90 days of generated GPU demand, forecast when possible.

    Writes :data:`cortex.forecast.history.DEMO_STREAMS` (seed 1) when ``gpu_demand`` is
    empty, then, with statsmodels installed, computes and stores the forecasts. Returns
    ``(demand rows written, forecasts stored or None without statsmodels)``.
    """
    from cortex.forecast.history import DEMO_STREAMS, generate
    from cortex.store.demand import ForecastStore

    now = now or datetime.now(UTC)
    store = DemandStore(engine)
    written = 0 if store.first() is not None else store.add(
        generate(DEMO_STREAMS, now, days=90, seed=1))
    if importlib.util.find_spec("statsmodels") is None:
        return written, None
    documents = compute(engine, ForecastSettings(), now)
    ForecastStore(engine).replace(documents)
    return written, len(documents)
