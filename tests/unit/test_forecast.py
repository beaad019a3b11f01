"""The demand forecast: statsmodels' ETS against seasonal naive, Little's law, exhaustion."""

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from cortex.forecast import model
from cortex.forecast.history import DemandStream, generate
from cortex.forecast.plan import (
    ForecastSettings,
    demand_series,
    exhaustion_hours,
    flavor_family,
    forecast_documents,
    project_in_use,
)
from cortex.forecast.supply import Supply
from cortex.store.demand import HourlyDemand

END = datetime(2026, 11, 23, 0, 0, tzinfo=UTC)  # a Monday
H100 = "NVIDIA H100 80GB HBM3"
STREAM = DemandStream(H100, "az-1", 1.5, trend=0.01, daily=0.6, weekend=0.4)


def hourly_gpus(rows, start, hours):
    """Whole GPUs asked per hour of generated demand rows."""
    series = np.zeros(hours)
    for row in rows:
        series[int((row["created_at"] - start) / timedelta(hours=1))] += row["gpus"]
    return series


@pytest.fixture(scope="module")
def ninety_days():
    """90 days of generated demand: daily and weekly seasons, a trend, Poisson noise."""
    start = END - timedelta(days=90)
    return start, hourly_gpus(generate([STREAM], END, days=90, seed=7), start, 90 * 24)


def daily(series):
    return series.reshape(-1, 24).sum(axis=1)


def test_the_generator_has_its_seasons_and_trend(ninety_days):
    _, y = ninety_days
    days = daily(y)
    weekday = [d for i, d in enumerate(days) if (END - timedelta(days=90 - i)).weekday() < 5]
    weekend = [d for i, d in enumerate(days) if (END - timedelta(days=90 - i)).weekday() >= 5]
    assert np.mean(weekend) < 0.6 * np.mean(weekday)
    by_hour = y.reshape(-1, 24).mean(axis=0)
    assert by_hour.argmax() in range(11, 18) and by_hour.argmin() in (*range(22, 24),
                                                                      *range(0, 6))
    assert days[-28:].mean() > 1.3 * days[:28].mean()


def test_beats_seasonal_naive_on_held_out_weeks(ninety_days):
    """Fit on 76 days, forecast the two held-out weeks: daily totals closer than naive."""
    start, y = ninety_days
    fitted, held_out = y[:-336], y[-336:]
    predicted = model.forecast(fitted, start, 336)
    assert predicted.method == "ETS(A,Ad,A) season 168 h"
    ours = np.abs(daily(predicted.mean) - daily(held_out)).mean()
    naive = np.abs(daily(model.seasonal_naive(fitted, 336)) - daily(held_out)).mean()
    assert ours < 0.9 * naive, (ours, naive)
    check = model.backtest(y, start, folds=4)
    assert check.folds == 4 and check.skill > 0.1, check


def test_the_interval_covers_about_its_probability(ninety_days):
    start, y = ninety_days
    predicted = model.forecast(y[:-336], start, 336, coverage=0.8)
    inside = np.mean((y[-336:] >= predicted.lower) & (y[-336:] <= predicted.upper))
    assert 0.7 <= inside <= 0.95, inside
    assert np.all(predicted.lower <= predicted.mean) and np.all(predicted.mean <= predicted.upper)


def test_short_or_empty_history_is_a_flat_forecast():
    assert model.forecast(np.zeros(500), END, 24).method == "mean"
    flat = model.forecast(np.array([2.0, 4.0, 0.0]), END, 5, paths=30)
    assert np.allclose(flat.mean, 2.0) and flat.paths.shape == (30, 5)
    assert model.forecast(np.ones(60) + np.arange(60) % 3, END, 24).season == 24
    with pytest.raises(ValueError):
        model.forecast(np.ones(10), END, 0)
    with pytest.raises(ValueError):
        model.forecast(np.ones(10), END, 5, coverage=1.0)
    with pytest.raises(ValueError):
        model.backtest(np.ones(1000), END, horizon=30)
    assert model.backtest(np.ones(300), END) is None


def test_seasonal_naive_repeats_last_season():
    y = np.arange(10.0)
    assert list(model.seasonal_naive(y, 6, season=4)) == [6, 7, 8, 9, 6, 7]
    assert list(model.seasonal_naive(y, 3, season=20)) == [9, 9, 9]


def test_littles_law_keeps_a_steady_state_and_follows_growth():
    steady = project_in_use(40, 2.0, np.full(100, 2.0))
    assert np.allclose(steady, 40), "lambda W = 2 x 20 h: nothing moves"
    growing = project_in_use(40, 2.0, np.full(100, 3.0))
    assert growing[-1] > 55 and np.all(np.diff(growing) > 0)
    assert np.allclose(project_in_use(0, 0.0, np.full(3, 1.0)), [1, 2, 3]), "no departures"
    paths = project_in_use(10, 1.0, np.ones((4, 6)))
    assert paths.shape == (4, 6)


def test_exhaustion_hours():
    assert exhaustion_hours(5, 10, np.array([6, 9, 10, 12])) == 3
    assert exhaustion_hours(5, 10, np.array([6, 7])) == np.inf
    assert exhaustion_hours(10, 10, np.array([1.0])) == 0
    assert list(exhaustion_hours(5, 10, np.array([[11, 12], [1, 2]]))) == [1, np.inf]


def test_documents_per_model_and_zone_with_refusals_counted():
    hour = END - timedelta(hours=1)
    rows = [HourlyDemand(hour, H100, "az-1", placed=4, refused=0),
            HourlyDemand(hour, H100, None, placed=0, refused=8),
            HourlyDemand(hour - timedelta(days=400), H100, "az-1", placed=99, refused=0)]
    supply = {(H100, "az-1"): Supply(16, 14), (H100, None): Supply(16, 14),
              ("any", None): Supply(16, 14)}
    settings = ForecastSettings(horizon=48, history=72, paths=20, backtest_folds=0)
    documents = forecast_documents(rows, supply, END, settings)
    assert [(d["model"], d["availability_zone"]) for d in documents] == [
        (H100, None), (H100, "az-1")]
    everywhere, zone = documents
    assert everywhere["history"][-1]["gpus"] == 12.0, "refused without a zone counts everywhere"
    assert zone["history"][-1]["gpus"] == 4.0, "the row 400 days old is outside the history"
    assert (zone["supply_gpus"], zone["used_gpus"], zone["free_gpus"]) == (16, 14, 2)
    assert len(zone["points"]) == 48 and zone["points"][0]["at"] == END.isoformat()
    assert zone["days_to_exhaustion_pessimistic"] <= zone["days_to_exhaustion"]


def test_history_starts_at_the_first_kept_demand():
    first = END - timedelta(hours=5)
    rows = [HourlyDemand(first, H100, "az-1", 1, 0)]
    settings = ForecastSettings(horizon=24, history=24 * 30, paths=20, backtest_folds=0)
    [_, zone] = forecast_documents(rows, {}, END, settings, first=first)
    assert zone["history_hours"] == 5, "hours before the first row are unknown, not zero"
    assert zone["supply_gpus"] == 0 and zone["days_to_exhaustion"] == 0.0


def test_demand_series_ignores_rows_off_the_grid():
    since = END - timedelta(hours=3)
    rows = [HourlyDemand(since, H100, "az-2", 1, 2), HourlyDemand(END, H100, "az-2", 5, 0)]
    series = demand_series(rows, since, 3)
    asked, placed = series[(H100, "az-2")]
    assert list(asked) == [3, 0, 0] and list(placed) == [1, 0, 0]
    assert set(series) == {(H100, "az-2"), (H100, None)}


def test_settings_refuse_nonsense():
    for bad in ({"horizon": 0}, {"coverage": 1.5}, {"backtest_folds": -1}, {"paths": 5}):
        with pytest.raises(ValueError):
            ForecastSettings(**bad)


def test_flavor_families():
    assert flavor_family("g5.2xlarge") == "g5"
    assert flavor_family("gpu-2xh100-pinned") == "gpu-2xh100-pinned"
    assert flavor_family("gpu-2xh100-pinned", "-.") == "gpu"
    assert flavor_family(".hidden") == ".hidden", "a separator first cuts nothing"
    assert flavor_family(None) == flavor_family("") == "-"


def test_flavor_families_forecast_demand_alone():
    hour = END - timedelta(hours=1)
    rows = [HourlyDemand(hour, H100, "az-1", 4, 0)]
    flavors = [HourlyDemand(hour, "h1.2gpu", "az-1", 2, 0),
               HourlyDemand(hour, "h1.4gpu", "az-1", 0, 4),
               HourlyDemand(hour, "l1.1gpu", "az-2", 1, 0)]
    settings = ForecastSettings(horizon=24, history=48, paths=20, backtest_folds=0)
    documents = forecast_documents(rows, {(H100, "az-1"): Supply(8, 2)}, END, settings,
                                   flavor_rows=flavors)
    families = [(d["flavor_family"], d["availability_zone"]) for d in documents
                if d["flavor_family"]]
    assert families == [("h1", None), ("h1", "az-1"), ("l1", None), ("l1", "az-2")]
    h1 = next(d for d in documents if (d["flavor_family"], d["availability_zone"])
              == ("h1", "az-1"))
    assert h1["history"][-1]["gpus"] == 6.0, "placed and refused of both flavors"
    assert h1["model"] == "any" and h1["supply_gpus"] is None
    assert h1["days_to_exhaustion"] is None and h1["points"][0]["in_use"] is None
    assert all(d["flavor_family"] is None for d in documents[:2]), "models first"


def test_a_series_statsmodels_cannot_fit_falls_back_to_its_mean(monkeypatch):
    from statsmodels.tsa.exponential_smoothing.ets import ETSModel

    def refuse(self, *args, **kwargs):
        raise ValueError("cannot fit")

    monkeypatch.setattr(ETSModel, "fit", refuse)
    found = model.forecast(np.arange(400) % 5 + 1.0, END, 24, paths=20)
    assert found.method == "mean (ETS could not fit)" and np.allclose(found.mean, 3.0)
    assert found.paths.shape == (20, 24)


def test_equal_series_are_fitted_once(monkeypatch):
    """A model's zone, its all-zone sum and its flavor family asking the same GPUs: one fit."""
    hour = END - timedelta(hours=1)
    rows = [HourlyDemand(hour - timedelta(hours=h), H100, "az-1", h % 3, 0) for h in range(60)]
    flavors = [HourlyDemand(r.hour, "h1.2gpu", "az-1", r.placed, 0) for r in rows]
    settings = ForecastSettings(horizon=24, history=72, paths=20, backtest_folds=0)
    fitted = []
    real = model.forecast
    monkeypatch.setattr(model, "forecast", lambda *a, **k: fitted.append(1) or real(*a, **k))
    documents = forecast_documents(rows, {(H100, "az-1"): Supply(8, 2)}, END, settings,
                                   flavor_rows=flavors)
    assert len(documents) == 4 and len(fitted) == 1
    assert len({d["forecast_gpus_per_day"] for d in documents}) == 1


def test_a_backtest_fold_starts_from_the_previous_folds_parameters(ninety_days, monkeypatch):
    start, y = ninety_days
    started = []
    real = model.forecast

    def recording(*args, start_params=None, **kwargs):
        started.append(start_params is not None)
        return real(*args, start_params=start_params, **kwargs)

    monkeypatch.setattr(model, "forecast", recording)
    check = model.backtest(y, start, folds=4)
    assert started == [False, True, True, True] and check.params is not None
