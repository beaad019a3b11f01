"""Forecast an hourly GPU demand series with statsmodels' ETS; backtest it.

The model is exponential smoothing in its state-space form (statsmodels'
``ETSModel``): additive errors, an additive damped trend and an additive season. With
at least two weeks of history the season is a week of 168 hours, which holds the
daily shape and the weekday/weekend difference at once (Hyndman and Athanasopoulos,
*Forecasting: Principles and Practice*, 3rd ed., ch. 8); with at least two days, a day
of 24 hours; with less, no season. Initial states are the heuristic ones
(statsmodels' ``initialization_method="heuristic"``, from the first seasons), so a fit
optimises the four smoothing parameters only: ~0.05 s for 90 days of hours. The
prediction interval is the model's own (additive errors: analytic). Demand cannot be
negative: forecasts and bounds are clipped at 0.

The yardstick is the seasonal-naive forecast (the value one season earlier, the same
hour of last week), which the backtest compares with at rolling origins.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field, replace
from datetime import datetime

import numpy as np

#: Hours in the weekly and daily seasons.
WEEK, DAY = 168, 24


@dataclass(frozen=True)
class SeriesForecast:
    """A forecast of ``len(mean)`` hours: mean, interval bounds (GPUs per hour), method.

    ``paths``: simulated futures (shape ``(paths, hours)``, clipped at 0) when asked:
    the hourly bounds are marginal, so what accumulates over the horizon (the GPUs in
    use) takes its interval from the paths, not from the bounds summed.
    """

    mean: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    method: str
    season: int
    paths: np.ndarray | None = None
    params: np.ndarray | None = None


def season_of(length: int) -> int:
    """The season the model uses for ``length`` hours of history: 168, 24 or 0 (none)."""
    if length >= 2 * WEEK:
        return WEEK
    if length >= 2 * DAY:
        return DAY
    return 0


def forecast(history: np.ndarray, start: datetime, horizon: int,
             coverage: float = 0.8, paths: int = 0, seed: int = 0,
             params: np.ndarray | None = None,
             start_params: np.ndarray | None = None) -> SeriesForecast:
    """Forecast ``horizon`` hours after ``history`` (GPUs asked per hour, oldest first).

    ``params``: the fitted parameters of a model of the same season (``params`` of an
    earlier forecast) to filter ``history`` with, instead of fitting (statsmodels'
    ``ETSModel.smooth``: ~0.01 s where a fit takes ~0.1); ``start_params``: where the
    fit's optimiser starts (a neighbouring fit's parameters: a third of the iterations).
    Either is ignored when its length does not match the model's. The forecast's own
    ``params`` are what it used.

    ``start``: the first hour of ``history`` (aligns the seasons); ``coverage``: the
    prediction interval's probability (0.8: the 10th to 90th percentile). Fewer than
    ten hours, or no demand at all, give the history's mean with a normal interval from
    its standard deviation (``method`` ``mean``), as does a series statsmodels cannot fit
    (``mean (ETS could not fit)``). ``paths`` > 0 also simulates that many
    futures from the fitted model (normal errors of its variance, seeded by ``seed``).
    Raises ValueError for a horizon < 1 or a coverage outside (0, 1).
    """
    if horizon < 1:
        raise ValueError("horizon must be at least one hour")
    if not 0 < coverage < 1:
        raise ValueError("coverage must be between 0 and 1")
    y = np.asarray(history, dtype=float)
    season = season_of(len(y))
    if len(y) < 10 or not np.any(y):
        return _flat(y, horizon, coverage, paths, seed)
    import pandas as pd
    from statsmodels.tsa.exponential_smoothing.ets import ETSModel

    index = pd.date_range(pd.Timestamp(start).tz_convert(None) if pd.Timestamp(start).tzinfo
                          else pd.Timestamp(start), periods=len(y), freq="h")
    series = pd.Series(y, index=index)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = ETSModel(series, error="add", trend="add", damped_trend=True,
                             seasonal="add" if season else None,
                             seasonal_periods=season or None,
                             initialization_method="heuristic" if season else "estimated")
            known = [p for p in (params, start_params)
                     if p is not None and len(p) == len(model.param_names)]
            if params is not None and known and known[0] is params:
                fitted = model.smooth(params)
            elif known:
                fitted = model.fit(disp=False, start_params=known[0])
            else:
                fitted = model.fit(disp=False)
            frame = fitted.get_prediction(start=len(y), end=len(y) + horizon - 1
                                          ).summary_frame(alpha=1 - coverage)
            simulated = None
            if paths:
                simulated = np.clip(np.asarray(fitted.simulate(
                    horizon, anchor="end", repetitions=paths,
                    rng=np.random.default_rng(seed))).reshape(horizon, paths).T, 0, None)
    except (ValueError, np.linalg.LinAlgError):  # a series the model cannot fit
        flat = _flat(y, horizon, coverage, paths, seed)
        return replace(flat, method="mean (ETS could not fit)")
    mean = np.clip(frame["mean"].to_numpy(), 0, None)
    lower = np.clip(frame["pi_lower"].to_numpy(), 0, None)
    upper = np.clip(frame["pi_upper"].to_numpy(), 0, None)
    name = f"ETS(A,Ad,A) season {season} h" if season else "ETS(A,Ad,N)"
    return SeriesForecast(mean, lower, upper, name, season, simulated,
                          np.asarray(fitted.params))


def _flat(y: np.ndarray, horizon: int, coverage: float, paths: int = 0,
          seed: int = 0) -> SeriesForecast:
    """The history's mean for every hour, with a normal interval from its spread."""
    mean = float(y.mean()) if len(y) else 0.0
    spread = float(y.std(ddof=1)) if len(y) > 1 else 0.0
    z = _normal_quantile(0.5 + coverage / 2)
    flat = np.full(horizon, mean)
    simulated = None
    if paths:
        simulated = np.clip(np.random.default_rng(seed).normal(mean, spread, (paths, horizon)),
                            0, None)
    return SeriesForecast(flat, np.clip(flat - z * spread, 0, None), flat + z * spread,
                          "mean", 0, simulated)


def _normal_quantile(p: float) -> float:
    """The standard normal quantile of ``p`` (scipy, a statsmodels dependency)."""
    from scipy.stats import norm

    return float(norm.ppf(p))


def seasonal_naive(history: np.ndarray, horizon: int, season: int = WEEK) -> np.ndarray:
    """Each hour's value one ``season`` earlier, repeated over ``horizon`` hours.

    With less than a season of history, the last value. Raises ValueError for an empty
    history.
    """
    y = np.asarray(history, dtype=float)
    if not len(y):
        raise ValueError("seasonal naive needs history")
    if len(y) < season:
        return np.full(horizon, y[-1])
    last = y[-season:]
    return np.resize(last, horizon)


@dataclass(frozen=True)
class Backtest:
    """Rolling-origin errors: mean absolute error of the model and of seasonal naive.

    Errors are of daily totals (GPUs asked per day), the resolution at which exhaustion
    is read; hourly counts of a few GPUs are mostly noise. ``skill``:
    ``1 - mae / seasonal_naive_mae`` (above 0: the model beats the yardstick; None when
    the yardstick is exact). ``folds`` origins, ``horizon`` hours each; ``params``: the
    parameters fitted at the last origin.
    """

    folds: int
    horizon: int
    mae: float
    seasonal_naive_mae: float
    skill: float | None
    params: np.ndarray | None = field(default=None, compare=False, repr=False)

    def as_dict(self) -> dict[str, float | int | None]:
        """The JSON form (``backtest`` of a forecast document)."""
        return {"folds": self.folds, "horizon_hours": self.horizon,
                "mae": round(self.mae, 4), "seasonal_naive_mae": round(self.seasonal_naive_mae, 4),
                "skill": None if self.skill is None else round(self.skill, 4)}


def backtest(history: np.ndarray, start: datetime, horizon: int = WEEK, folds: int = 4,
             coverage: float = 0.8) -> Backtest | None:
    """Forecast from ``folds`` rolling origins, each ``horizon`` hours before the next.

    The last origin is ``horizon`` hours before the end; each fold fits on what came
    before its origin and is scored on the days of the ``horizon`` hours after it
    (``horizon`` a whole number of days). Each fold's fit starts from the previous
    fold's parameters (``start_params`` of :func:`forecast`): origins a week apart have
    nearly the same optimum, which the optimiser then reaches in a third of the
    iterations. Origins that would leave less than two weeks to fit on are dropped;
    None when none is left. Raises ValueError for a horizon that is not a whole number
    of days.
    """
    if horizon < DAY or horizon % DAY:
        raise ValueError("the backtest horizon must be whole days")
    y = np.asarray(history, dtype=float)
    origins = [len(y) - k * horizon for k in range(folds, 0, -1)]
    origins = [o for o in origins if o >= 2 * WEEK]
    if not origins:
        return None
    model_errors, naive_errors = [], []
    params = None
    for origin in origins:
        actual = _daily(y[origin:origin + horizon])
        fold = forecast(y[:origin], start, horizon, coverage, start_params=params)
        params = fold.params
        predicted = _daily(fold.mean)
        naive = _daily(seasonal_naive(y[:origin], horizon))
        model_errors.append(np.abs(predicted - actual))
        naive_errors.append(np.abs(naive - actual))
    mae = float(np.concatenate(model_errors).mean())
    naive_mae = float(np.concatenate(naive_errors).mean())
    skill = None if math.isclose(naive_mae, 0.0) else 1 - mae / naive_mae
    return Backtest(len(origins), horizon, mae, naive_mae, skill, params)


def _daily(hourly: np.ndarray) -> np.ndarray:
    """Sums of each whole day of an hourly series (a trailing part day is dropped)."""
    days = len(hourly) // DAY
    return np.asarray(hourly[:days * DAY], dtype=float).reshape(days, DAY).sum(axis=1)
