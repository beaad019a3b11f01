"""Foresight for operators: GPU demand forecasts against the fleet's GPU supply.

- :mod:`cortex.forecast.model`: an hourly demand series forecast with statsmodels'
  exponential smoothing (ETS, additive damped trend, a weekly season of 168 hours that
  carries the daily one), its prediction interval, and a rolling-origin backtest
  against the seasonal-naive forecast;
- :mod:`cortex.forecast.supply`: whole GPUs per model and availability zone, and how
  many are in use, from the knowledge view;
- :mod:`cortex.forecast.plan`: per model and zone, the demand forecast, the GPUs in
  use projected from it, and the days until they reach the supply;
- :mod:`cortex.forecast.history`: a seeded generator of GPU demand with daily and
  weekly seasonality and a trend (tests, the demo, benchmarks).

The demand is what the decision log keeps (:mod:`cortex.store.demand`). statsmodels is
the ``forecast`` extra; nothing here is imported by the API's request path.
"""
