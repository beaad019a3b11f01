"""Failure behaviour that never hurts the caller: outages, slow plugins, hostile input."""

import json
import time

import pytest
from sqlalchemy.engine import make_url

from cortex.api.app import create_app
from cortex.db.engine import make_engine
from cortex.pipeline.config import build_pipelines
from cortex.plugins.base import Filter, Weigher
from cortex.plugins.registry import register
from tests.api.conftest import make_conf
from tests.api.test_contract import assert_error, nova_body, post
from tests.proxy import TcpProxy
from tests.waiting import DEADLINE, ManualClock, wait_until


@pytest.fixture
def proxied_app(engine, database_url):
    """An app whose database connections go through a proxy the test can cut."""
    url = make_url(database_url)
    if url.get_backend_name() != "postgresql":
        pytest.fail("the outage test needs PostgreSQL")
    proxy = TcpProxy((url.host or "127.0.0.1", url.port or 5432))
    proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(False)
    app_engine = make_engine(proxied, connect_timeout=1)
    app = create_app(make_conf(**{"database.connection": proxied,
                                  "database.knowledge_check_interval": 0.0,
                                  "database.max_knowledge_age": 0.5}), engine=app_engine)
    yield app, proxy
    app.extensions["cortex"].decisions.close()
    app_engine.dispose()


def test_database_outage_serves_last_view_then_503_then_recovers(proxied_app):
    app, proxy = proxied_app
    client = app.test_client()
    # The knowledge's age is what this test is about: it moves when the test says so
    # (by the real clock, a busy machine could age the view past 0.5 s between calls).
    knowledge = app.extensions["cortex"].knowledge
    knowledge._clock = clock = ManualClock()
    knowledge.refresh(force=True)  # create_app's warm-up took its time by the real clock
    assert post(client, "nova", nova_body()).status_code == 200
    proxy.cut()
    assert post(client, "nova", nova_body()).status_code == 200  # last view, still fresh
    knowledge.wait_for_refresh(DEADLINE)  # the check that call started, failed
    clock.advance(0.6)
    started = time.monotonic()
    response = post(client, "nova", nova_body())
    error = assert_error(response, 503)
    # not a speed target: the call must not wait on the dead database (Nova gives up
    # after 10 s); half of that is room enough for any machine
    assert time.monotonic() - started < 5.0, "503 must come well inside the callers' timeout"
    assert "knowledge is" in error["detail"] and "database unreachable" in error["detail"]
    knowledge.wait_for_refresh(DEADLINE)
    health = client.get("/healthcheck")
    assert health.status_code == 503 and "database unreachable" in health.get_data(as_text=True)
    proxy.restore()
    wait_until(lambda: post(client, "nova", nova_body()).status_code == 200, what="recovery")
    assert client.get("/healthcheck").status_code == 200


@register
class SlowFilter(Filter):
    """Test filter that takes 50 ms per request."""

    name = "test_slow_filter"

    def check(self, host, request, candidate):
        time.sleep(0.05 / len(request.candidates))
        return "slow says no"


class PipelineClock(ManualClock):
    """``time`` as the API and the pipeline engine see it: a perf_counter the test moves."""

    def perf_counter(self):
        return self.now

    def __getattr__(self, name):
        return getattr(time, name)


def spend(seconds):
    """Take ``seconds`` of a slow plugin's time (the pipeline_clock fixture moves its clock)."""
    time.sleep(seconds)


@register
class SlowWeigher(Weigher):
    """Test weigher that takes 300 ms per request."""

    name = "test_slow_weigher"

    def weigh(self, host, request, candidate):
        spend(0.3 / len(request.candidates))
        return 1.0


@pytest.fixture
def pipeline_clock(monkeypatch):
    """The request's clock stands still but for what the slow plugins spend: where the
    budget runs out does not depend on how long the rest of the call takes here."""
    clock = PipelineClock()
    monkeypatch.setattr("cortex.api.scheduler.time", clock)
    monkeypatch.setattr("cortex.scheduler.service.time", clock)
    monkeypatch.setattr("cortex.pipeline.engine.time", clock)
    monkeypatch.setattr(f"{__name__}.spend", clock.advance)
    return clock


def app_with(engine, steps, **overrides):
    pipelines = build_pipelines({"defaults": {"nova": "p"},
                                 "pipelines": {"p": {"service": "nova", **steps}}})
    return create_app(make_conf(**overrides), engine=engine, pipelines=pipelines)


def test_request_time_budget_answers_503(engine, pipeline_clock):
    app = app_with(engine, {"weighers": [{"name": "test_slow_weigher"},
                                         {"name": "weigher_binpack"}]},
                   **{"scheduler.request_time_budget": 0.15})
    error = assert_error(post(app.test_client(), "nova", nova_body()), 503)
    assert "time budget exceeded" in error["detail"] and "weigher_binpack" in error["detail"]
    app.extensions["cortex"].decisions.close()


def test_slow_step_skipped_by_policy_keeps_hosts(engine):
    app = app_with(engine, {"filters": [{"name": "test_slow_filter", "on_error": "skip",
                                         "max_duration_ms": 5}]})
    client = app.test_client()
    response = post(client, "nova", nova_body())
    assert response.status_code == 200 and len(response.get_json()["hosts"]) == 8
    app.extensions["cortex"].decisions.flush(DEADLINE)
    decision = client.get(f"/v1/decisions/{response.headers['x-cortex-decision-id']}")
    step = decision.get_json()["steps"][0]
    assert step["status"] == "error" and "limit 5 ms" in step["reason"]
    assert "removed" not in step
    app.extensions["cortex"].decisions.close()


def test_slow_step_fail_closed_is_503(engine):
    app = app_with(engine, {"filters": [{"name": "test_slow_filter", "max_duration_ms": 5}]})
    error = assert_error(post(app.test_client(), "nova", nova_body()), 503)
    assert "StepTooSlow" in error["detail"]
    app.extensions["cortex"].decisions.close()


@pytest.mark.parametrize("payload, fragment", [
    ('{"spec": {}, "spec": {}, "hosts": [], "weights": {}}', "duplicate key 'spec'"),
    ("[" * 100000 + "]" * 100000, "not JSON"),
    ('{"hosts": [], "weights": {"a": Infinity}, "spec": {}}', "Infinity"),
    ('{"hosts": [], "weights": {"a": -Infinity}, "spec": {}}', "Infinity"),
    ("\u00e9".encode("latin-1"), "not JSON"),
])
def test_hostile_bodies_are_4xx(module_client, payload, fragment):
    error = assert_error(post(module_client, "nova", payload), 400)
    assert fragment in error["detail"]


def test_deeply_nested_unknown_field_is_tolerated_or_refused_never_500(client):
    body = nova_body()
    nested = current = {}
    for _ in range(500):
        current["x"] = {}
        current = current["x"]
    body["spec"]["nova_object.data"]["deep"] = nested
    assert post(client, "nova", json.dumps(body)).status_code in (200, 400)


def test_huge_host_list_is_answered(client):
    body = nova_body(); hosts = [f"h{i:05d}" for i in range(20000)]  # noqa: E702
    body["hosts"] = [{"host": h, "hypervisor_hostname": h} for h in hosts]
    body["weights"] = {h: float(i % 7) for i, h in enumerate(hosts)}
    response = post(client, "nova", body)
    assert response.status_code == 200
    assert sorted(response.get_json()["hosts"]) == sorted(hosts)  # all unknown: all kept


def test_nul_in_query_is_400_not_a_database_error(client):
    # found by the schemathesis fuzz test: PostgreSQL refuses NUL in text
    assert_error(client.get("/v1/decisions?resource_id=a%00b"), 400)
    assert_error(client.get("/v1/decisions/a%00b"), 400)
