"""GPU demand recorded with the decisions, forecasts served by /v1/forecasts and /metrics."""

import copy
import json
import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import delete, select

from cortex.cmd import manage
from cortex.db import migrate
from cortex.db.engine import make_engine
from cortex.db.models import GpuDemand, SyncStatus
from cortex.forecast.history import DemandStream, generate
from cortex.forecast.plan import ForecastSettings
from cortex.forecast.run import compute
from cortex.knowledge.loader import load_view, read_version
from cortex.store.demand import DemandStore, ForecastStore
from cortex.sync.runner import run_source
from cortex.sync.sources.forecast import ForecastSource
from tests.api.test_contract import assert_error, post
from tests.api.test_ui_forecasts import empty
from tests.conftest import FIXTURES, load_body
from tests.waiting import DEADLINE

GPU_BODY = FIXTURES / "nova" / "gpu-2xh100-pinned.json"
H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture
def clean(engine):
    """Empty demand and forecast tables before and after (the session database is shared)."""
    empty(engine)
    yield
    empty(engine)


def demand_rows(app, engine):
    """The demand rows once the decision log has written what it holds."""
    app.extensions["cortex"].decisions.flush(DEADLINE)
    with engine.connect() as connection:
        return [r._asdict() for r in connection.execute(
            select(GpuDemand.__table__).order_by(GpuDemand.created_at))]


def only_hosts(body, hosts):
    """``body`` with its candidates (and Nova's weights) cut down to ``hosts``."""
    body = copy.deepcopy(body)
    body["hosts"] = [h for h in body["hosts"] if h["host"] in hosts]
    body["weights"] = {h: w for h, w in body["weights"].items() if h in hosts}
    return body


def test_a_gpu_create_is_recorded_as_demand_placed(client, app, engine, clean):
    response = post(client, "nova", load_body(GPU_BODY))
    assert response.status_code == 200
    first = response.get_json()["hosts"][0]
    [row] = demand_rows(app, engine)
    assert row["decision_id"] == response.headers["x-cortex-decision-id"]
    assert (row["model"], row["availability_zone"], row["gpus"], row["vgpus"]) == (
        H100, "az-1", 2, 0)
    assert (row["outcome"], row["host"], row["service"]) == ("placed", first, "nova")
    assert row["model_named"] is True, "the body's PCI request names the H100's product id"
    assert row["power_delta_watts"] > 0
    assert row["flavor"] == load_body(GPU_BODY)["spec"]["nova_object.data"]["flavor"][
        "nova_object.data"]["name"]
    decision = client.get(f"/v1/decisions/{row['decision_id']}").get_json()
    assert decision["demand"]["model"] == H100 and decision["demand"]["outcome"] == "placed"
    assert decision["demand"]["model_named"] is True


def test_a_create_taking_any_gpu_is_recorded_unnamed(client, app, engine, clean):
    body = load_body(GPU_BODY)
    data = body["spec"]["nova_object.data"]["pci_requests"]["nova_object.data"]
    for request in data["requests"]:
        for spec in request["nova_object.data"]["spec"]:
            spec.pop("product_id")
    response = post(client, "nova", body)
    assert response.status_code == 200 and response.get_json()["hosts"]
    [row] = demand_rows(app, engine)
    assert (row["model"], row["model_named"], row["outcome"]) == (H100, False, "placed"), \
        "counted where it went, but not as demand only that model can serve"


def test_a_gpu_create_no_host_passes_is_demand_refused(client, app, engine, clean):
    body = only_hosts(load_body(GPU_BODY), {"cmp0002", "cmp0003"})  # no PCPU there
    response = post(client, "nova", body)
    assert response.status_code == 200 and response.get_json()["hosts"] == []
    [row] = demand_rows(app, engine)
    assert (row["outcome"], row["host"], row["power_delta_watts"]) == ("refused", None, None)
    assert row["model"] == H100, "the product id the request names, as the fleet names it"
    assert row["availability_zone"] == "az-1", "the zone the request asked for"


def test_cpu_creates_and_gpu_moves_are_not_demand(client, app, engine, clean):
    assert post(client, "nova", load_body(FIXTURES / "nova" / "cpu-general-purpose.json")
                ).status_code == 200
    move = load_body(GPU_BODY)
    move["resize"] = True
    move["spec"]["nova_object.data"]["scheduler_hints"] = {"_nova_check_type": ["resize"]}
    assert post(client, "nova", move).status_code == 200
    assert demand_rows(app, engine) == []


def stored_forecasts(engine, now):
    """Three weeks of generated H100 demand, then forecasts computed and stored."""
    streams = [DemandStream(H100, "az-1", 0.5, trend=0.02)]
    DemandStore(engine).add(generate(streams, now, days=21, seed=3))
    documents = compute(engine, ForecastSettings(horizon=72, history=21 * 24, paths=50,
                                                 backtest_folds=1), now)
    ForecastStore(engine).replace(documents)
    return documents


def test_forecasts_served_as_stored(client, engine, clean):
    assert client.get("/v1/forecasts").get_json() == {"forecasts": []}
    now = datetime.now(UTC)
    documents = stored_forecasts(engine, now)
    answer = client.get("/v1/forecasts").get_json()["forecasts"]
    assert [(f["model"], f["availability_zone"]) for f in answer] == [
        (d["model"], d["availability_zone"]) for d in documents]
    assert (H100, "az-1") in [(f["model"], f["availability_zone"]) for f in answer]
    assert all("points" not in f and "history" not in f for f in answer)
    zone = client.get("/v1/forecasts", query_string={"model": H100, "availability_zone": "az-1",
                                                      "series": "true"}).get_json()["forecasts"]
    [h100] = zone
    assert len(h100["points"]) == 72 and h100["history"]
    assert h100["supply_gpus"] > 0, "the demo fleet's H100s are the supply"
    everywhere = client.get("/v1/forecasts", query_string={"model": H100,
                                                           "availability_zone": ""})
    assert [f["availability_zone"] for f in everywhere.get_json()["forecasts"]] == [None]
    assert_error(client.get("/v1/forecasts?series=maybe"), 400)
    families = client.get("/v1/forecasts?flavor_family=gpu").get_json()["forecasts"]
    assert {(f["flavor_family"], f["availability_zone"]) for f in families} == {
        ("gpu", None), ("gpu", "az-1")}, "the generator's flavors are gpu.<n>gpu"
    assert all(f["supply_gpus"] is None for f in families)
    models = client.get("/v1/forecasts?flavor_family=").get_json()["forecasts"]
    assert models and all(f["flavor_family"] is None for f in models)


def test_days_to_exhaustion_exported(client, engine, clean):
    documents = stored_forecasts(engine, datetime.now(UTC))
    text = client.get("/metrics").get_data(as_text=True)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = {(s.labels["model"], s.labels["availability_zone"]): s.value
               for s in families["cortex_gpu_days_to_exhaustion"].samples}
    assert "any" not in {model for model, _ in samples}, "flavor families have no supply"
    for document in [d for d in documents if d["flavor_family"] is None]:
        expected = document["days_to_exhaustion"]
        value = samples[(document["model"], document["availability_zone"] or "")]
        assert value == (math.inf if expected is None else expected)
    stamp = families["cortex_gpu_forecast_timestamp_seconds"].samples[0].value
    assert abs(stamp - datetime.fromisoformat(documents[0]["computed_at"]).timestamp()) < 1


def test_demand_retention_prunes_only_old_rows(engine, clean):
    now = datetime.now(UTC)
    store = DemandStore(engine)
    store.add(generate([DemandStream(H100, "az-1", 2.0)], now, days=3, seed=1))
    with engine.connect() as connection:
        before = connection.execute(select(GpuDemand.created_at)).scalars().all()
    gone = store.prune(1.0, now=now)
    assert gone == sum(1 for at in before if at.astimezone(UTC) < now - timedelta(days=1)) > 0
    assert store.first() >= now - timedelta(days=1)


def test_cortex_manage_forecast(database_url, engine, clean, monkeypatch, capsys):
    monkeypatch.setenv("CORTEX_DATABASE_CONNECTION", database_url)
    monkeypatch.delenv("CORTEX_CONFIG_FILE", raising=False)
    assert manage.main(["demand", "generate", "--days", "23", "--seed", "2"]) == 0
    assert "synthetic GPU demand rows over 23 days" in capsys.readouterr().out
    assert manage.main(["forecast", "--horizon", "36h", "-f", "json", "--series"]) == 0
    documents = json.loads(capsys.readouterr().out)
    [h100] = [d for d in documents if (d["model"], d["availability_zone"]) == (H100, "az-1")]
    assert h100["horizon_hours"] == 36 and len(h100["points"]) == 36
    assert 22 * 24 < h100["history_hours"] <= 23 * 24
    assert h100["backtest"]["folds"] == 1, "one week after the two weeks a fit needs"
    # the demo's H100 demand by flavor: g1.2xh100, a synced GPU flavor, counted now
    [g1] = [d for d in documents if (d["flavor_family"], d["availability_zone"])
            == ("g1", "az-1")]
    [two] = [f for f in g1["placeable"] if f["flavor"] == "g1.2xh100"]
    assert two["gpus"] == 2 and isinstance(two["placeable_now"], int)
    assert ForecastStore(engine).latest() == [], "stored only with --store"
    assert manage.main(["forecast", "--store"]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[0].split() == list(manage.FORECAST_COLUMNS)
    assert H100 in table
    assert "flavors against the instances that fit now (placeable_now):" in table
    assert any(line.split()[:5] == ["g1", "az-1", "g1.2xh100", "2", str(two["placeable_now"])]
               for line in table.splitlines())
    assert {(d["model"], d["horizon_hours"]) for d in ForecastStore(engine).latest()} >= {
        (H100, 14 * 24)}
    with pytest.raises(SystemExit) as bad:
        manage.main(["forecast", "--horizon", "fortnight"])
    assert bad.value.code == 2
    assert "not a number of hours, days or weeks" in capsys.readouterr().err


def test_the_forecast_source_stores_without_moving_the_knowledge(engine, clean):
    DemandStore(engine).add(generate([DemandStream(H100, "az-1", 0.8)], datetime.now(UTC),
                                     days=16, seed=5))
    with engine.connect() as connection:
        version = read_version(connection)
    source = ForecastSource(ForecastSettings(horizon=48, history=16 * 24, paths=20,
                                             backtest_folds=0))
    try:
        result = run_source(engine, source)
    finally:  # other tests count the sources in sync_status (cortex_knowledge_age_seconds)
        with engine.begin() as connection:
            detail = connection.execute(select(SyncStatus.detail).where(
                SyncStatus.source == "forecast")).scalar_one_or_none()
            connection.execute(delete(SyncStatus).where(SyncStatus.source == "forecast"))
    assert result.ok, result.error
    stored = ForecastStore(engine).latest()
    assert (H100, "az-1") in {(d["model"], d["availability_zone"]) for d in stored}
    with engine.connect() as connection:
        assert read_version(connection) == version
    assert detail["forecasts"] == len(stored)


def test_hourly_sums_on_sqlite(tmp_path):
    """The embedded SQLite sums per hour as PostgreSQL does (strftime for date_trunc)."""
    sqlite = make_engine(f"sqlite:///{tmp_path / 'demand.sqlite'}")
    migrate.upgrade(sqlite)
    now = datetime(2026, 11, 26, 12, 30, tzinfo=UTC)
    rows = list(generate([DemandStream(H100, "az-1", 3.0)], now, days=2, seed=9))
    DemandStore(sqlite).add(rows)
    hourly = DemandStore(sqlite).hourly(now - timedelta(days=3), now)
    expected = {}
    for row in rows:
        hour = row["created_at"].replace(minute=0, second=0, microsecond=0)
        placed, refused = expected.get(hour, (0, 0))
        expected[hour] = ((placed + row["gpus"], refused) if row["outcome"] == "placed"
                          else (placed, refused + row["gpus"]))
    assert {h.hour: (h.placed, h.refused) for h in hourly} == expected
    assert all(h.hour.tzinfo is not None for h in hourly)
    sqlite.dispose()


def test_cortex_manage_sync_runs_the_forecast_source(database_url, engine, clean, monkeypatch,
                                                     capsys):
    monkeypatch.setenv("CORTEX_DATABASE_CONNECTION", database_url)
    monkeypatch.setenv("CORTEX_FORECAST_HISTORY_DAYS", "16")
    monkeypatch.delenv("CORTEX_CONFIG_FILE", raising=False)
    DemandStore(engine).add(generate([DemandStream(H100, "az-2", 0.5)], datetime.now(UTC),
                                     days=16, seed=8))
    try:
        assert manage.main(["sync", "--once", "--source", "forecast"]) == 0
    finally:
        with engine.begin() as connection:
            connection.execute(delete(SyncStatus).where(SyncStatus.source == "forecast"))
    assert "forecast: 0 rows, 0 changed" in capsys.readouterr().out
    assert (H100, "az-2") in {(d["model"], d["availability_zone"])
                              for d in ForecastStore(engine).latest()}


def test_the_view_counts_the_recorded_sizes_per_instance(engine, clean):
    now = datetime.now(UTC)
    rows = [{"decision_id": f"00000000-0000-4000-8000-00000000000{i}", "created_at": at,
             "service": "nova", "model": H100, "availability_zone": "az-1", "gpus": gpus,
             "vgpus": 0, "instances": instances, "outcome": "placed"}
            for i, (at, gpus, instances) in enumerate([
                (now - timedelta(hours=1), 4, 2), (now - timedelta(days=2), 2, 1),
                (now - timedelta(days=3), 1, 1), (now - timedelta(days=40), 8, 1),
                (now - timedelta(hours=2), 0, 1)])]
    DemandStore(engine).add(rows)
    assert dict(load_view(engine, request_sizes=True).gpu_request_sizes) == {1: 1, 2: 2}, \
        "4 GPUs over 2 instances are two 2-GPU creates' worth; 40 days ago is too old"
    assert dict(load_view(engine).gpu_request_sizes) == {}, "read only when a pipeline asks"


def test_an_app_counts_the_sizes_only_for_a_pipeline_that_learns_them():
    from cortex import conf as config
    from cortex.api.app import learns_sizes
    from cortex.pipeline.config import load_pipelines
    from cortex.simulator.session import trace_sizes

    shipped = load_pipelines(config.shipped_file("pipelines.yaml"))
    assert learns_sizes(shipped), "kvm-gpu-topology-aware weighs the demand per model"
    without = replace(shipped, pipelines={
        name: replace(p, weighers=tuple(s for s in p.weighers
                                        if s.name != "weigher_gpu_model_reserve"))
        for name, p in shipped.pipelines.items()})
    assert not learns_sizes(without)
    assert learns_sizes(trace_sizes(without))


def test_the_view_counts_the_named_demand_per_model(engine, clean):
    now = datetime.now(UTC)
    rows = [{"decision_id": f"00000000-0000-4000-8000-00000000001{i}", "created_at": at,
             "service": "nova", "model": model, "model_named": named,
             "availability_zone": "az-1", "gpus": gpus, "vgpus": vgpus, "instances": 1,
             "outcome": outcome}
            for i, (at, model, named, gpus, vgpus, outcome) in enumerate([
                (now - timedelta(hours=1), H100, True, 4, 0, "placed"),
                (now - timedelta(hours=2), H100, True, 2, 0, "refused"),
                (now - timedelta(hours=3), H100, False, 8, 0, "placed"),
                (now - timedelta(hours=4), "any", False, 1, 0, "refused"),
                (now - timedelta(hours=5), H100, True, 0, 2, "placed"),
                (now - timedelta(days=40), H100, True, 8, 0, "placed")])]
    DemandStore(engine).add(rows)
    assert dict(load_view(engine, request_sizes=True).gpu_model_demand) == {
        H100: 6.0, "any": 9.0}, "named GPUs on their model, the rest any; no vGPUs, 28 days"
    assert dict(load_view(engine).gpu_model_demand) == {}, "read only when a pipeline asks"
