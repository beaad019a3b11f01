"""Flavor families' forecasts against their flavors' placeable supply.

On the simulator's HGX fleet (16 boards a zone, some GPUs taken): the placeable counts
the forecasts are set against are those of the flavor gauges, checked against placing
one instance at a time (tests/unit/test_capacity.py's brute force); the days to
exhaustion against stepping through the forecast hour by hour.
"""

import math
from datetime import UTC, datetime, timedelta

import pytest

from cortex.conf import shipped_file
from cortex.forecast.plan import (
    FlavorSupply,
    ForecastSettings,
    against_placeable,
    forecast_documents,
)
from cortex.knowledge.gpu_names import ANY_MODEL
from cortex.pipeline.config import load_pipelines
from cortex.scheduler.service import SchedulerService
from cortex.services.capacity import FlavorCapacity
from cortex.simulator.capacity import Shape
from cortex.store.demand import HourlyDemand
from tests.unit.test_capacity import Fixed, brute_force, hgx  # noqa: F401 (a fixture)

END = datetime(2026, 11, 23, tzinfo=UTC)
HISTORY = 13 * 24  # under two weeks: no weekly season to fit, a fast fit
SETTINGS = ForecastSettings(horizon=7 * 24, history=HISTORY, paths=20, backtest_folds=0)
FLAVORS = [Shape(8, 32768, 1, flavor="t1.1gpu"), Shape(16, 65536, 2, flavor="t1.2gpu"),
           Shape(64, 262144, 8, flavor="t1.8gpu")]


class Knowledge(Fixed):
    @property
    def current(self):
        return self._view


@pytest.fixture(scope="module")
def supply(request):
    """The HGX fleet's placeable supply of :data:`FLAVORS`, as the flavor gauges count it."""
    view = request.getfixturevalue("hgx")
    gauges = FlavorCapacity(SchedulerService(load_pipelines(shipped_file("pipelines.yaml")),
                                             Knowledge(view)), lambda: FLAVORS)
    gauges.refresh()
    return view, gauges.supply()


def test_the_supply_is_the_one_by_one_count(supply):
    view, found = supply
    assert found.gpus == {"t1.1gpu": 1, "t1.2gpu": 2, "t1.8gpu": 8}
    for shape in FLAVORS:
        if shape.gpus > 1:  # (every shape's count is checked so in tests/unit/test_capacity.py)
            for zone in ("az-1", "az-2"):
                placed = sum(brute_force(view, shape, zone).values())
                assert found.placeable[(shape.flavor, zone)] == placed, (shape.flavor, zone)
        assert found.now(shape.flavor, None) == sum(
            found.placeable[(shape.flavor, z)] for z in ("az-1", "az-2"))
    assert found.now("t1.4gpu", "az-1") is None and found.now("t1.4gpu", None) is None


def rows(hours, flavor, refused_every=0):
    """Hourly demand rows of ``flavor`` in az-1: one instance an hour, two every third.

    With ``refused_every``, the calls of every such hour are refused.
    """
    gpus = {"t1.1gpu": 1, "t1.2gpu": 2, "t1.8gpu": 8, "t1.4gpu": 4}[flavor]
    found = []
    for h in range(hours):
        asked = (2 if h % 3 == 0 else 1) * gpus
        refused = bool(refused_every) and h % refused_every == 0
        found.append(HourlyDemand(END - timedelta(hours=h + 1), flavor, "az-1",
                                  0 if refused else asked, asked if refused else 0))
    return found


def last_week(demand, flavor):
    """``(asked, placed)`` GPUs a day of ``flavor`` over the last week, summed row by row."""
    week = [r for r in demand if r.model == flavor and r.hour >= END - timedelta(days=7)]
    return (sum(r.placed + r.refused for r in week) / 7, sum(r.placed for r in week) / 7)


def by_hand(document, supply, flavor):
    """Days until ``flavor``'s net new instances fill its placeable supply, hour by hour."""
    family = [f for f in document["flavors"]]
    asked = sum(f["asked_gpus_per_day"] for f in family)
    mine = next(f for f in family if f["flavor"] == flavor)
    per = supply.gpus[flavor]
    room = supply.now(flavor, document["availability_zone"])
    if room == 0:
        return 0.0
    grown = 0.0
    for hour, point in enumerate(document["points"], start=1):
        grown += point["gpus"] * mine["asked_gpus_per_day"] / asked / per
        grown -= mine["placed_gpus_per_day"] / 24 / per
        if grown >= room:
            return round(hour / 24, 2)
    return None


def test_days_to_exhaustion_step_through_the_forecast(supply):
    view, found = supply
    hours = HISTORY
    demand = (rows(hours, "t1.1gpu") + rows(hours, "t1.2gpu", refused_every=2)
              + rows(hours, "t1.8gpu", refused_every=1) + rows(hours, "t1.4gpu"))
    documents = forecast_documents([], {}, END, SETTINGS, flavor_rows=demand)
    family = next(d for d in documents if d["flavor_family"] == "t1"
                  and d["availability_zone"] == "az-1")
    assert family["model"] == ANY_MODEL and family["days_to_exhaustion"] is None
    # last week's GPUs a day, asked and placed, per flavor
    assert [(f["flavor"], f["asked_gpus_per_day"], f["placed_gpus_per_day"])
            for f in family["flavors"]] == [
        (name, *(round(v, 3) for v in last_week(demand, name)))
        for name in ("t1.1gpu", "t1.2gpu", "t1.4gpu", "t1.8gpu")]
    assert family["flavors"][3]["placed_gpus_per_day"] == 0.0
    assert sum(p["gpus"] for p in family["points"]) / 7 == pytest.approx(
        family["forecast_gpus_per_day"], abs=0.01)
    found_doc = against_placeable(family, found)
    got = {f["flavor"]: f for f in found_doc["placeable"]}
    for flavor in ("t1.1gpu", "t1.2gpu", "t1.8gpu"):
        assert got[flavor]["placeable_now"] == found.placeable[(flavor, "az-1")]
        assert got[flavor]["days_to_exhaustion"] == by_hand(family, found, flavor), flavor
    # placed as fast as asked: nothing grows; a flavor no gauge counts has no figure
    assert got["t1.1gpu"]["days_to_exhaustion"] is None
    assert got["t1.4gpu"] == {"flavor": "t1.4gpu", "gpus": None, "placeable_now": None,
                              "instances_per_day": None, "days_to_exhaustion": None}
    # every 8-GPU call refused: the board count is used up first
    assert got["t1.8gpu"]["days_to_exhaustion"] < got["t1.2gpu"]["days_to_exhaustion"]
    assert found_doc["placeable_flavor"] == "t1.8gpu"
    assert found_doc["placeable_days_to_exhaustion"] == got["t1.8gpu"]["days_to_exhaustion"]
    asked = {f["flavor"]: f["asked_gpus_per_day"] for f in family["flavors"]}
    assert got["t1.2gpu"]["instances_per_day"] == pytest.approx(
        family["forecast_gpus_per_day"] * asked["t1.2gpu"] / sum(asked.values()) / 2,
        abs=0.01)


def test_nothing_placeable_is_out_now_and_models_are_untouched():
    document = {"flavor_family": "t1", "availability_zone": "az-1", "horizon_hours": 2,
                "points": [{"gpus": 1.0}, {"gpus": 1.0}],
                "flavors": [{"flavor": "t1.2gpu", "asked_gpus_per_day": 2.0,
                             "placed_gpus_per_day": 0.0}]}
    full = FlavorSupply({"t1.2gpu": 2}, {("t1.2gpu", "az-1"): 0})
    found = against_placeable(document, full)
    assert found["placeable"][0]["days_to_exhaustion"] == 0.0
    assert found["placeable_flavor"] == "t1.2gpu"
    # one instance fits: half an instance arrives an hour, out in the second hour
    one = FlavorSupply({"t1.2gpu": 2}, {("t1.2gpu", "az-1"): 1})
    assert against_placeable(document, one)["placeable_days_to_exhaustion"] == round(2 / 24, 2)
    assert math.isclose(against_placeable(document, one)["placeable"][0]["instances_per_day"],
                        12.0)
    model_doc = {"flavor_family": None, "model": "m", "days_to_exhaustion": 3.0}
    assert against_placeable(model_doc, full) == model_doc
