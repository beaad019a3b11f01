"""A worker warms up before it serves (cortex.services.warmup)."""

import logging
import time
from dataclasses import replace

import pytest
from sqlalchemy import text

from cortex.api.app import create_app
from cortex.scheduler.service import SchedulingFailed, simulation
from cortex.services.warmup import SHAPES, warm_up
from tests.api.conftest import make_conf
from tests.conftest import FIXTURES, load_body
from tests.waiting import ManualClock


def decisions(engine) -> int:
    with engine.connect() as connection:
        return connection.execute(text("SELECT count(*) FROM decisions")).scalar()


def test_warm_up_loads_the_view_and_asks_as_simulations(engine, database_url):
    app = create_app(make_conf(**{"database.connection": database_url,
                                  "scheduler.reservation_ttl": 300.0}), engine=engine)
    services = app.extensions["cortex"]
    asked = []
    schedule = services.scheduler.schedule
    services.scheduler.schedule = lambda request, options, *args: (
        asked.append((request, options)) or schedule(request, options, *args))
    before = decisions(engine)
    try:
        warm_up(app)
        assert services.knowledge.current is not None
        assert len(asked) == len(SHAPES)
        view = services.knowledge.current
        for request, options in asked:
            assert options.simulated and not options.promise and not options.record
            assert {c.host for c in request.candidates} == set(view.hosts)
        assert sorted(r.gpu_count for r, _ in asked) == sorted(s[0] for s in SHAPES)
        services.decisions.flush()
        assert decisions(engine) == before
        assert services.scheduler.reservations.active(view.loaded_at) == []
    finally:
        services.decisions.close()
        services.knowledge.close()


def test_warm_up_readies_the_series_and_the_store_connection_of_live_calls(engine,
                                                                           database_url):
    """A fresh worker's first live call finds its metric series made and a promise's
    connection open: in gunicorn's multiprocess mode the series alone cost several ms."""
    app = create_app(make_conf(**{"database.connection": database_url,
                                  "scheduler.reservation_ttl": 300.0}), engine=engine)
    services = app.extensions["cortex"]
    series = services.scheduler.metrics.step_duration
    rehearsed = []
    rehearse = services.scheduler.reservations.rehearse

    def recording_rehearsal(made, now):
        rehearsed.append((made.host, rehearse(made, now)))
        return rehearsed[-1][1]

    services.scheduler.reservations.rehearse = recording_rehearsal
    try:
        assert not series._metrics
        warm_up(app)
        made = set(series._metrics)
        assert ("kvm-gpu-topology-aware", "inflight_reservations") in made
        assert ("kvm-gpu-topology-aware", "filter_pci_numa_affinity") in made
        assert {p for p, _ in made} == {"kvm-gpu-topology-aware",
                                        "kvm-general-purpose-load-balancing"}
        # the promise ran to its write, and was rolled back
        assert rehearsed == [("cortex-warm-up", True)]
        view = services.knowledge.current
        assert services.scheduler.reservations.active(view.loaded_at) == []
        text_ = app.test_client().get("/metrics").get_data(as_text=True)
        assert ('cortex_pipeline_step_duration_seconds_count{pipeline="kvm-gpu-topology-'
                'aware",step="inflight_reservations"} 0.0') in text_
    finally:
        services.decisions.close()
        services.knowledge.close()


def test_warm_up_without_a_database_leaves_it_to_the_first_call(caplog):
    app = create_app(make_conf(**{
        "database.connection": "postgresql+psycopg://postgres@127.0.0.1:9/nowhere",
        "database.connect_timeout": 1}))
    try:
        with caplog.at_level(logging.WARNING, "cortex.services.warmup"):
            warm_up(app)
        assert "knowledge unavailable" in caplog.text
    finally:
        app.extensions["cortex"].decisions.close()
        app.extensions["cortex"].knowledge.close()


def test_a_serving_worker_collects_young_garbage_less_often(monkeypatch):
    import gc

    from cortex.services.warmup import SERVING_THRESHOLDS, serving_collector

    monkeypatch.setattr(gc, "set_threshold", lambda *t: seen.append(t))
    seen = []
    serving_collector()
    assert seen == [SERVING_THRESHOLDS] and SERVING_THRESHOLDS[0] > gc.get_threshold()[0]


def asking_app(engine, database_url, clock: ManualClock, each: float, timeout: float):
    """An app with ``[api] warm_up_timeout`` ``timeout`` whose scheduler moves ``clock``
    ``each`` seconds per call; ``(app, [(request, options)] asked)``."""
    app = create_app(make_conf(**{"database.connection": database_url,
                                  "api.warm_up_timeout": timeout}), engine=engine)
    services = app.extensions["cortex"]
    asked = []
    schedule = services.scheduler.schedule

    def timed_schedule(request, options, *args):
        asked.append((request, options))
        decision = schedule(request, options, *args)
        clock.advance(each)
        return decision

    services.scheduler.schedule = timed_schedule
    return app, asked


def test_warm_up_stops_at_its_budget(engine, database_url, caplog):
    """Budget 10 s, 4 s a request: asked at 0, 4 and 8 s, each to stop at the budget's
    end; the two left are skipped, and the worker serves."""
    clock = ManualClock()
    app, asked = asking_app(engine, database_url, clock, each=4.0, timeout=10.0)
    try:
        with caplog.at_level(logging.INFO, "cortex.services.warmup"):
            warm_up(app, started=clock(), clock=clock)
        assert [r.gpu_count for r, _ in asked] == [s[0] for s in SHAPES[:3]]
        deadlines = [options.deadline for _, options in asked]
        # 10, 6 and 2 s left: each request's deadline is the warm-up's end, on its clock
        assert deadlines[0] - deadlines[1] == pytest.approx(4.0, abs=0.5)
        assert deadlines[1] - deadlines[2] == pytest.approx(4.0, abs=0.5)
        assert deadlines[0] - time.perf_counter() < 10.0
        assert "2 of 5 requests skipped, 12.0 s after the worker's start" in caplog.text
        assert app.extensions["cortex"].knowledge.current is not None
    finally:
        app.extensions["cortex"].decisions.close()
        app.extensions["cortex"].knowledge.close()


def test_warm_up_counts_from_the_workers_start(engine, database_url, caplog):
    """A worker whose start used its whole budget loads the view and asks nothing."""
    clock = ManualClock()
    app, asked = asking_app(engine, database_url, clock, each=0.0, timeout=5.0)
    try:
        with caplog.at_level(logging.WARNING, "cortex.services.warmup"):
            warm_up(app, started=clock() - 5.0, clock=clock)
        assert asked == []
        assert app.extensions["cortex"].knowledge.current is not None
        assert "5 of 5 requests skipped, 5.0 s after the worker's start" in caplog.text
    finally:
        app.extensions["cortex"].decisions.close()
        app.extensions["cortex"].knowledge.close()


def test_a_call_past_its_deadline_runs_no_step(app):
    """The deadline a warm-up request carries ends it as the request budget would: 503."""
    services = app.extensions["cortex"]
    request = services.parsers["nova"](load_body(FIXTURES / "nova" / "cpu-general-purpose.json"))
    with pytest.raises(SchedulingFailed) as info:
        services.scheduler.schedule(request, replace(simulation(),
                                                     deadline=time.perf_counter() - 1.0))
    assert info.value.status == 503 and "time budget exceeded" in info.value.detail
