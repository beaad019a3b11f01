"""Poison input, oversized chunked bodies, slow bodies and the security of /metrics, /,
/healthcheck?detail=1 and agent tokens (issue "never break the caller", HTTP part).

Each test here failed on the code before the fix: a weight of ``1e999`` answered 200 and
then broke every read of the decision log; a 401-digit weight was a 503; NUL or a lone
surrogate in a name lost the decision's whole write batch; a chunked body over the limit
was a 400; an agent token could write any host's topology; /metrics and
/healthcheck?detail=1 were public; GET / echoed the Host header.
"""

import io
import json
import socket
import threading
import time
import uuid
from datetime import UTC, datetime

import pytest
from keystonemiddleware.fixture import AuthTokenFixture
from sqlalchemy import insert, select, text

from cortex.api.app import create_app
from cortex.api.guard import BodyGuard, Watchdog
from cortex.db.models import Decision
from cortex.decision import COMPACT_FORMAT
from cortex.decision import Decision as DecisionRecord
from cortex.store.decisions import DecisionWriter, storable
from tests.api.conftest import keystone_conf, make_conf
from tests.api.test_contract import assert_error, nova_body, post
from tests.waiting import wait_until

# Agent hosts outside the demo fleet: a report for a demo host would change the
# answers of the tests after these (the session database is shared).
TOKENS = ("ops:admin:admin-secret, grafana:reader:reader-secret, "
          "hardening-a:agent:agent-secret")
REPORT = {"numa_cells": [{"id": 0, "cpus": "0-3", "memory_mb": 1024}], "gpus": [],
          "gpu_links": []}


def raw_weight(body: dict, literal: str) -> str:
    """``body`` as JSON text with its first host's weight written as ``literal``."""
    host = body["hosts"][0]["host"]
    body = json.loads(json.dumps(body))
    body["weights"][host] = "@@WEIGHT@@"
    return json.dumps(body).replace('"@@WEIGHT@@"', literal)


@pytest.mark.parametrize("literal", ["1e999", "-1e999", "9" * 401, "-" + "9" * 401])
def test_weights_beyond_a_double_are_400_not_stored(module_client, literal):
    response = post(module_client, "nova", raw_weight(nova_body(), literal))
    error = assert_error(response, 400)
    assert "weights." in error["detail"]
    assert "x-cortex-decision-id" not in response.headers


def test_non_finite_number_deep_in_the_spec_is_400(module_client):
    text = json.dumps(nova_body()).replace('"spec": {', '"spec": {"x_number": 1e999, ', 1)
    assert "1e999" in text
    assert "not a finite number" in assert_error(post(module_client, "nova", text),
                                                 400)["detail"]


@pytest.mark.parametrize("place", ["host", "hypervisor_hostname", "weight key", "request_id",
                                   "global_request_id"])
@pytest.mark.parametrize("bad", ["\x00", "\ud800", "\x1b", "\x7f", "\x85"])
@pytest.mark.parametrize("escaped", [True, False], ids=["escaped", "raw"])
def test_control_characters_and_lone_surrogates_in_names_are_400(module_client, place, bad,
                                                                  escaped):
    body = nova_body()
    host = body["hosts"][0]["host"]
    if place in ("host", "weight key"):
        body["weights"][f"{host}{bad}"] = body["weights"].pop(host)
        if place == "host":
            body["hosts"][0]["host"] = f"{host}{bad}"
    elif place == "hypervisor_hostname":
        body["hosts"][0]["hypervisor_hostname"] = f"node{bad}"
    else:
        body["context"][place] = f"req-{bad}-1"
    # raw: DEL, C1 and the surrogate as UTF-8 bytes (json.dumps escapes C0 either way)
    text = json.dumps(body, ensure_ascii=escaped).encode("utf-8", "surrogatepass")
    assert_error(post(module_client, "nova", text), 400)


def wait_for_decision(client, decision_id: str) -> dict:
    """The decision ``decision_id`` once the writer has stored it."""
    def stored():
        response = client.get(f"/v1/decisions/{decision_id}")
        return response.get_json() if response.status_code == 200 else None
    return wait_until(stored, what=f"decision {decision_id} stored")


def test_nul_and_lone_surrogate_elsewhere_are_answered_and_stored_replaced(client):
    body = nova_body()
    marker = f"req-{uuid.uuid4()}"
    body["context"]["request_id"] = marker
    body["spec"]["nova_object.data"]["instance_uuid"] = "inst-\x00\ud800"
    response = post(client, "nova", json.dumps(body))
    assert response.status_code == 200, response.get_data(as_text=True)
    decision = wait_for_decision(client, response.headers["x-cortex-decision-id"])
    assert decision["request_id"] == marker
    assert decision["resource_id"] == "inst-\ufffd\ufffd"


def record(marker: str, **changes) -> DecisionRecord:
    """A decision for the writer."""
    fields = {"service": "nova", "pipeline": "default", "request_id": marker,
              "resource_id": "inst-1", "intent": "create", "outcome": "ok", "status": 200,
              "hosts": ("a",), "weights": {"a": 1.0}, "result": ("a",),
              "id": str(uuid.uuid4()), "created_at": datetime.now(UTC), "duration_ms": 1.0}
    return DecisionRecord(**(fields | changes))


def test_one_unstorable_record_does_not_lose_its_batch(engine):
    marker = f"batch-{uuid.uuid4()}"
    unstorable = []
    writer = DecisionWriter(engine, batch=200, on_unstorable=lambda: unstorable.append(1))
    poison = [record(marker, resource_id="inst-\x00"),
              record(marker, hosts=("a\ud800",), weights={"a\ud800": 1.0}, result=("a\ud800",)),
              record(marker, weights={"a": float("inf")}, detail="x\x00y")]
    rows = [record(marker) for _ in range(13)] + poison
    writer._write(rows)  # one batch, as the writer thread hands it over
    writer.close()
    with engine.connect() as connection:
        stored = connection.execute(select(Decision).where(
            Decision.request_id == marker)).all()
    assert len(stored) == 16 and writer.dropped == 0
    by_id = {row.id: row for row in stored}
    assert by_id[poison[0].id].resource_id == "inst-\ufffd"
    assert by_id[poison[1].id].record["hosts"] == ["a\ufffd"]
    assert by_id[poison[2].id].record["weights"] == [None]
    assert by_id[poison[2].id].record["detail"] == "x\x00y"  # json keeps NUL as it came
    assert len(unstorable) == 2, "the text column's NUL and the lone surrogate"


def test_storable_replaces_what_postgresql_refuses():
    value = {"k\x00": ["a\ud800b", float("nan"), 2**70, 5, 1.5, None, True]}
    assert storable(value) == {"k\ufffd": ["a\ufffdb", None, str(2**70), 5, 1.5, None, True]}


@pytest.fixture
def poisoned(engine):
    """A stored decision whose caller weight is null (what ``1e999`` used to become)."""
    decision_id = str(uuid.uuid4())
    weigher = {"name": "w", "kind": "weigher", "status": "ran", "multiplier": 1.0,
               "raw": [0.5, 0.25]}
    with engine.begin() as connection:
        connection.execute(insert(Decision), [{
            "id": decision_id, "created_at": datetime.now(UTC), "service": "nova",
            "pipeline": "default", "request_id": "req-poisoned", "global_request_id": None,
            "resource_id": "inst-poisoned", "intent": "create", "outcome": "ok",
            "duration_ms": 1.0,
            "record": {"format": COMPACT_FORMAT, "hosts": ["a", "b"], "weights": [None, 1.0],
                       "weighed": ["a", "b"], "steps": [weigher], "result": ["a", "b"],
                       "unknown_hosts": [], "status": 200}}])
    yield decision_id
    with engine.begin() as connection:
        connection.execute(Decision.__table__.delete().where(Decision.id == decision_id))


def test_a_poisoned_record_never_breaks_the_decision_api(client, poisoned):
    listing = client.get("/v1/decisions?limit=1000")
    assert listing.status_code == 200, listing.get_data(as_text=True)
    assert poisoned in [d["id"] for d in listing.get_json()["decisions"]]
    one = client.get(f"/v1/decisions/{poisoned}")
    assert one.status_code == 200 and one.get_json()["damaged"]
    assert one.get_json()["hosts"] == ["a", "b"]
    assert client.get(f"/v1/decisions/{poisoned}/explanation").status_code == 200
    page = client.get(f"/ui/decisions/{poisoned}", headers={"Accept": "text/html"})
    assert page.status_code == 200, page.get_data(as_text=True)[:300]


def test_chunked_body_over_the_limit_is_413(engine):
    app = create_app(make_conf(**{"api.max_body_bytes": 1000}), engine=engine)
    try:
        response = app.test_client().post(
            "/scheduler/nova/external", input_stream=io.BytesIO(b'{"a": "' + b"x" * 5000 + b'"}'),
            content_type="application/json", headers={"Transfer-Encoding": "chunked"})
        assert_error(response, 413)
        small = app.test_client().post(
            "/scheduler/nova/external", input_stream=io.BytesIO(json.dumps({"a": 1}).encode()),
            content_type="application/json", headers={"Transfer-Encoding": "chunked"})
        assert_error(small, 400)  # read whole and judged: not an oversize
    finally:
        app.extensions["cortex"].decisions.close()


def test_limit_out_of_range_is_400_not_clamped(client):
    for limit in ("0", "-1", "1001"):
        assert_error(client.get(f"/v1/decisions?limit={limit}"), 400)
    assert client.get("/v1/decisions?limit=1000").status_code == 200


@pytest.fixture
def no_reports_left(engine):
    """Delete the topology reports of the ``hardening-*`` hosts after the test."""
    yield
    with engine.begin() as connection:
        connection.execute(text("DELETE FROM host_topologies WHERE host LIKE 'hardening-%'"))


@pytest.mark.parametrize("host, token, status", [
    ("hardening-a", "agent-secret", 200), ("hardening-b", "agent-secret", 403),
    ("hardening-b", "admin-secret", 200), ("hardening-b", "reader-secret", 403),
])
def test_agent_token_writes_only_its_own_host(static_app, no_reports_left, host, token,
                                              status):
    response = static_app.test_client().post(
        f"/v1/topology/{host}", json=REPORT, headers={"X-Auth-Token": token})
    assert response.status_code == status, response.get_data(as_text=True)
    if status == 403:
        assert "secret" not in response.get_data(as_text=True)


def test_keystone_agent_is_bound_to_its_user_name(engine, tmp_path, no_reports_left):
    fixture = AuthTokenFixture()
    fixture.setUp()
    try:
        fixture.add_token_data(token_id="tok-agent", user_name="hardening-a",
                               role_list=["cortex-agent"], project_id="p")
        app = create_app(keystone_conf(tmp_path), engine=engine)
        client = app.test_client()
        own = client.post("/v1/topology/hardening-a", json=REPORT,
                          headers={"X-Auth-Token": "tok-agent"})
        assert own.status_code == 200, own.get_data(as_text=True)
        other = client.post("/v1/topology/hardening-b", json=REPORT,
                            headers={"X-Auth-Token": "tok-agent"})
        assert_error(other, 403)
        app.extensions["cortex"].decisions.close()
    finally:
        fixture.cleanUp()


@pytest.mark.parametrize("headers, status", [
    ({}, 401), ({"X-Auth-Token": "agent-secret"}, 403), ({"X-Auth-Token": "reader-secret"}, 200),
    ({"Authorization": "Bearer reader-secret"}, 200), ({"Authorization": "Bearer nope"}, 401),
])
def test_metrics_need_the_reader_role(module_static_app, headers, status):
    response = module_static_app.test_client().get("/metrics", headers=headers)
    assert response.status_code == status
    if status == 200:
        assert b"cortex_decisions_unstorable_total" in response.data
        assert b"cortex_host_utilization_ratio" in response.data


def test_public_metrics_option_opens_metrics(engine):
    app = create_app(make_conf(**{"api.auth_strategy": "static", "api.static_tokens": TOKENS,
                                  "api.public_metrics": True}), engine=engine)
    assert app.test_client().get("/metrics").status_code == 200
    assert_error(app.test_client().get("/v1/decisions"), 401)
    app.extensions["cortex"].decisions.close()


@pytest.mark.parametrize("token, status", [(None, 401), ("agent-secret", 403),
                                           ("reader-secret", 200)])
def test_healthcheck_detail_needs_the_reader_role(module_static_app, token, status):
    headers = {"X-Auth-Token": token} if token else {}
    client = module_static_app.test_client()
    assert client.get("/healthcheck?detail=1", headers=headers).status_code == status
    assert client.get("/healthcheck").get_data(as_text=True) == "OK"


def test_version_links_never_come_from_the_host_header(engine):
    app = create_app(make_conf(), engine=engine)
    response = app.test_client().get("/", headers={"Host": "evil.example:666"})
    assert "evil" not in response.get_data(as_text=True)
    assert response.get_json()["versions"][0]["links"][0]["href"] == "/v1"
    app.extensions["cortex"].decisions.close()
    app = create_app(make_conf(**{"api.public_url": "https://cortex.example.org:8080/"}),
                     engine=engine)
    response = app.test_client().get("/", headers={"Host": "evil.example:666"})
    assert response.get_json()["versions"][0]["links"][0]["href"] == \
        "https://cortex.example.org:8080/v1"
    app.extensions["cortex"].decisions.close()


def echo_app(environ, start_response):
    """A WSGI app answering the body it got."""
    body = environ["wsgi.input"].read()
    start_response("200 OK", [("Content-Length", str(len(body)))])
    return [body]


def call(guard, environ):
    """``(status line, body)`` of ``guard`` for ``environ``."""
    seen = {}
    body = b"".join(guard(environ, lambda status, headers: seen.update(status=status)))
    return seen["status"], body


def test_guard_answers_408_when_a_body_trickles_and_frees_the_thread():
    server, client = socket.socketpair()
    guard = BodyGuard(echo_app, max_bytes=1000, timeout=0.5, watchdog=Watchdog())
    environ = {"CONTENT_LENGTH": "100", "gunicorn.socket": server,
               "wsgi.input": server.makefile("rb")}
    stop = threading.Event()

    def trickle():  # one byte every 50 ms: each read would wait less than any recv timeout
        while not stop.is_set():
            try:
                client.send(b"x")
            except OSError:
                return
            stop.wait(0.05)

    sender = threading.Thread(target=trickle, daemon=True)
    sender.start()
    started = time.monotonic()
    try:
        status, body = call(guard, environ)
    finally:
        stop.set()
        sender.join(30)
        server.close()
        client.close()
    assert status.startswith("408"), body
    assert json.loads(body)["errors"][0]["status"] == 408
    assert time.monotonic() - started < 30  # ended by the deadline, not by the sender


def test_guard_passes_a_whole_body_and_refuses_a_long_one():
    guard = BodyGuard(echo_app, max_bytes=10)
    assert call(guard, {"CONTENT_LENGTH": "5", "wsgi.input": io.BytesIO(b"hello")}) == \
        ("200 OK", b"hello")
    status, _ = call(guard, {"CONTENT_LENGTH": "11", "wsgi.input": io.BytesIO(b"x" * 11)})
    assert status.startswith("413")
    status, _ = call(guard, {"HTTP_TRANSFER_ENCODING": "chunked",
                             "wsgi.input": io.BytesIO(b"x" * 11)})
    assert status.startswith("413")
    status, _ = call(guard, {"CONTENT_LENGTH": "5", "wsgi.input": io.BytesIO(b"abc")})
    assert status.startswith("400")
    status, _ = call(guard, {"CONTENT_LENGTH": "x", "wsgi.input": io.BytesIO(b"abc")})
    assert status.startswith("400")
