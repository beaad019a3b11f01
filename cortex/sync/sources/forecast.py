"""The ``forecast`` source: cortex-sync recomputes the GPU demand forecasts.

Not a service read: every ``[sync] forecast_interval`` (an hour) the leader fits the
demand the decision log kept (:mod:`cortex.forecast`) against the supply in the
knowledge and replaces ``gpu_forecasts`` whole, inside the run's transaction. The
knowledge version does not move (the scheduler reads nothing of it): the source
counts no changed rows, and says in ``sync_status.detail`` how many forecasts it
wrote and the soonest exhaustion.
"""

from __future__ import annotations

from cortex.conf import Config, ConfigError
from cortex.forecast.plan import ForecastSettings
from cortex.forecast.run import compute, require_statsmodels, settings_from_conf
from cortex.store.demand import ForecastStore
from cortex.sync.source import Source, SyncContext


class ForecastSource(Source):
    """Compute and store the forecasts with ``settings``."""

    name = "forecast"

    def __init__(self, settings: ForecastSettings) -> None:
        self._settings = settings

    @classmethod
    def from_conf(cls, conf: Config) -> ForecastSource:
        """The source of ``[forecast]``; ConfigError when statsmodels is not installed."""
        try:
            require_statsmodels()
        except RuntimeError as exc:
            raise ConfigError(f"[sync] sources: {exc}") from None
        return cls(settings_from_conf(conf))

    def sync(self, ctx: SyncContext) -> None:
        """Compute the forecasts on the run's connection and store them."""
        documents = compute(ctx.connection, self._settings)
        ForecastStore(ctx.connection).replace(documents)
        soonest = [d["days_to_exhaustion"] for d in documents
                   if d["days_to_exhaustion"] is not None]
        ctx.detail["forecasts"] = len(documents)
        ctx.detail["soonest_exhaustion_days"] = min(soonest) if soonest else None
