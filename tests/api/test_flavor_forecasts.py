"""Flavor families' forecasts against placeable supply, as the API, the dashboard and the CLI
answer them.

Generated demand of the demo's H100 flavors (``g1.<n>xh100``: the demo servers'
``g1.2xh100`` is a synced GPU flavor, the others are not) is forecast and stored on the
session's database; the app's flavor gauges give the placeable supply.
"""

import html
import re
from datetime import UTC, datetime

import pytest

from cortex.cmd.capacity import print_placeable
from cortex.forecast.history import DemandStream, generate
from cortex.forecast.plan import ForecastSettings, against_placeable
from cortex.forecast.run import compute
from cortex.services.capacity import FLAVOR_CAPACITY
from cortex.store.demand import DemandStore, ForecastStore
from tests.api.test_ui_forecasts import empty

H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture
def stored(engine):
    """Three weeks of H100 demand by ``g1`` flavor, forecast and stored; emptied after."""
    empty(engine)
    now = datetime.now(UTC)
    stream = DemandStream(H100, "az-1", 0.8, trend=0.05, flavor_family="g1",
                          flavor_name="{family}.{gpus}xh100")
    DemandStore(engine).add(generate([stream], now, days=21, seed=5))
    documents = compute(engine, ForecastSettings(horizon=96, history=21 * 24, paths=40,
                                                 backtest_folds=0), now)
    ForecastStore(engine).replace(documents)
    yield documents
    empty(engine)


def family(client):
    (found,) = client.get("/v1/forecasts?flavor_family=g1&availability_zone=az-1&series=true"
                          ).get_json()["forecasts"]
    return found


def test_the_api_sets_a_family_against_its_flavors_placeable_supply(app, client, stored):
    gauges = app.extensions[FLAVOR_CAPACITY]
    before = family(client)
    assert before["placeable"] is None, "not counted yet: no figure, never a count inline"
    gauges.refresh()
    supply = gauges.supply()
    found = family(client)
    placeable = {f["flavor"]: f for f in found["placeable"]}
    assert set(placeable) == {f["flavor"] for f in found["flavors"]} >= {"g1.2xh100"}
    assert placeable["g1.2xh100"]["gpus"] == 2
    assert placeable["g1.2xh100"]["placeable_now"] == supply.placeable[("g1.2xh100", "az-1")]
    assert placeable["g1.8xh100"]["placeable_now"] is None, "no synced flavor of that name"
    document = next(d for d in stored if d["flavor_family"] == "g1"
                    and d["availability_zone"] == "az-1")
    assert found == against_placeable(document, supply)
    # without the series, the same figures
    (plain,) = client.get("/v1/forecasts?flavor_family=g1&availability_zone=az-1"
                          ).get_json()["forecasts"]
    assert plain["placeable"] == found["placeable"] and "points" not in plain


def test_the_forecast_page_shows_the_flavors_beside_the_models(app, client, stored):
    app.extensions[FLAVOR_CAPACITY].refresh()
    found = family(client)
    page = html.unescape(client.get("/ui/forecasts?refresh=0&az=az-1").get_data(as_text=True))
    table = re.search(r'<table class="grid placeable" data-family="g1">(.*?)</table>', page,
                      re.S)
    assert table, "no placeable table for g1"
    row = re.search(r"<tr><td>g1\.2xh100</td>(.*?)</tr>", table.group(1), re.S)
    cells = re.findall(r'<td class="num">([^<]*)</td>', row.group(1))
    two = next(f for f in found["placeable"] if f["flavor"] == "g1.2xh100")
    days = two["days_to_exhaustion"]
    assert cells[:3] == ["2", str(two["placeable_now"]), str(two["instances_per_day"])]
    assert cells[3] == (str(days) if days is not None else "not within 4.0 d")
    assert "not a synced GPU flavor" in table.group(1)
    assert f'data-model="{H100}"' in page, "the model's forecast beside it"


def test_cortex_manage_forecast_prints_the_counted_flavors(capsys):
    documents = [{"flavor_family": "g1", "availability_zone": "az-1", "placeable": [
        {"flavor": "g1.2xh100", "gpus": 2, "placeable_now": 4, "instances_per_day": 2.5,
         "days_to_exhaustion": 11.67},
        {"flavor": "g1.8xh100", "gpus": None, "placeable_now": None,
         "instances_per_day": None, "days_to_exhaustion": None}]},
        {"flavor_family": None, "availability_zone": "az-1", "model": H100}]
    print_placeable(documents, "table")
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "flavors against the instances that fit now (placeable_now):"
    assert lines[4].split() == ["g1", "az-1", "g1.2xh100", "2", "4", "2.5", "11.67"]
    assert lines[5] == "not synced GPU flavors, not counted: g1.8xh100"
    print_placeable(documents, "json")
    assert capsys.readouterr().out == "", "json and yaml carry it in the documents"
