"""The foresight page: stored forecasts drawn soonest first, energy per zone, live panel."""

import re
from datetime import UTC, datetime

import pytest
from sqlalchemy import delete

from cortex.dashboard.forecasts import forecast_chart
from cortex.db.models import GpuDemand, GpuForecast
from cortex.forecast.history import DemandStream, generate
from cortex.forecast.plan import ForecastSettings
from cortex.forecast.run import compute
from cortex.store.demand import DemandStore, ForecastStore

H100 = "NVIDIA H100 80GB HBM3"


def stored(engine):
    """Three weeks of generated H100 and L40S demand; forecasts computed and stored."""
    now = datetime.now(UTC)
    streams = [DemandStream(H100, "az-1", 0.6, trend=0.03),
               DemandStream("NVIDIA L40S", "az-1", 2.0, trend=0.05)]
    DemandStore(engine).add(generate(streams, now, days=21, seed=11))
    documents = compute(engine, ForecastSettings(horizon=96, history=21 * 24, paths=40,
                                                 backtest_folds=1), now)
    ForecastStore(engine).replace(documents)
    return documents


def empty(engine):
    """Empty the demand and forecast tables (the session database records every GPU
    create the tests before made as demand)."""
    with engine.begin() as connection:
        connection.execute(delete(GpuDemand))
        connection.execute(delete(GpuForecast))


@pytest.fixture
def forecasts(engine):
    """Stored forecasts of this module's demand alone, the tables emptied before and after."""
    empty(engine)
    yield stored(engine)
    empty(engine)


def test_page_draws_every_forecast_soonest_first(client, forecasts):
    page = client.get("/ui/forecasts?refresh=0").get_data(as_text=True)
    sections = re.findall(r'<section class="forecast" data-model="([^"]*)" '
                          r'data-family="([^"]*)" data-zone="([^"]*)"', page)
    assert len(sections) == len(forecasts)
    order = {(d["model"], d["flavor_family"] or "", d["availability_zone"] or ""): d
             for d in forecasts}
    days = [order[s]["days_to_exhaustion"] for s in sections]
    known = [d for d in days if d is not None]
    assert known == sorted(known) and days[:len(known)] == known, "soonest first, never last"
    assert page.count('class="band"') == len(forecasts)
    families = [d for d in forecasts if d["flavor_family"]]
    assert families and page.count("flavor family gpu") == len(families)
    assert page.count('class="chart forecast-in-use"') == len(forecasts) - len(families)
    assert 'hx-get' not in page.split('id="forecasts-panel"')[1][:200], "refresh=0: not live"
    assert 'id="energy"' in page and "<td>az-1</td>" in page


def test_panel_filters_and_refreshes(client, forecasts):
    page = client.get("/ui/forecasts?model=NVIDIA+L40S&az=az-1&refresh=5").get_data(as_text=True)
    assert 'hx-trigger="every 5s"' in page
    assert "/ui/forecasts/panel?model=NVIDIA+L40S&amp;az=az-1&amp;refresh=5" in page
    panel = client.get("/ui/forecasts/panel?model=NVIDIA+L40S&az=az-1")
    assert panel.status_code == 200 and panel.headers["Cache-Control"] == "no-store"
    text = panel.get_data(as_text=True)
    assert text.count('<section class="forecast"') == 1 and "<html" not in text
    assert client.get("/ui/forecasts?refresh=abc").status_code == 400


def test_without_forecasts_the_page_says_how_to_make_them(client):
    page = client.get("/ui/forecasts").get_data(as_text=True)
    assert 'id="no-forecasts"' in page and "cortex-manage forecast --store" in page


def test_chart_geometry_follows_the_document():
    document = {"supply_gpus": 10, "used_gpus": 4, "days_to_exhaustion": 1.0,
                "history": [{"at": "t", "gpus": g} for g in (0.0, 2.0, 4.0)],
                "points": [{"at": "t", "gpus": 3.0, "lower": 1.0, "upper": 5.0,
                            "in_use": 4.0 + h / 4, "in_use_pessimistic": 4.0 + h / 2}
                           for h in range(48)]}
    chart = forecast_chart(document)
    history = [tuple(map(float, p.split(","))) for p in chart["demand"]["history"].split()]
    assert len(history) == 3 and history[0][1] > history[2][1], "SVG y grows downwards"
    assert [x for x, _ in history] == sorted(x for x, _ in history)
    mean = [tuple(map(float, p.split(","))) for p in chart["demand"]["mean"].split()]
    assert history[-1][0] < chart["now_x"] <= mean[0][0]
    assert len(chart["demand"]["band"].split()) == 96
    assert chart["in_use"]["supply_y"] < chart["in_use"]["now_used"]
    assert mean[0][0] < chart["in_use"]["exhaustion_x"] < mean[-1][0]
