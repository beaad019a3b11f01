"""Decisions are stored compact and read back whole (cortex.decision, cortex.store.decisions).

Every bundled request body of every service runs through the API. The service hands the
writer a typed Decision; its stored record, after a JSON round trip as the database
would store it, must read back as the same decision: every step with its raw and scaled
values per host and the engine's final weights to the last bit; and
``GET /v1/decisions/<id>`` must answer its document.
"""

import json
import math
from pathlib import Path

import pytest

from cortex.decision import COMPACT_FORMAT, Decision, StepResult
from tests.waiting import DEADLINE

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BODIES = sorted(p for service in ("nova", "cinder", "manila")
                for p in (FIXTURES / service).glob("*.json"))


def _json(value):
    return json.loads(json.dumps(value))


def read_back(decision: Decision) -> Decision:
    """``decision`` as the decision log reads it: its row's record after a JSON round trip."""
    row = decision.as_row()
    columns = {k: v for k, v in row.items() if k != "record"}
    return Decision.from_record(_json(row["record"]), **columns)


@pytest.fixture
def submitted(app, monkeypatch):
    """The decisions the service hands to the writer, in order."""
    items = []
    writer = app.extensions["cortex"].decisions
    original = writer.submit
    monkeypatch.setattr(writer, "submit", lambda item: (items.append(item), original(item))[1])
    return items


@pytest.mark.parametrize("path", BODIES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_the_stored_record_reads_back_whole(client, submitted, path):
    response = client.post(f"/scheduler/{path.parent.name}/external", data=path.read_bytes(),
                           content_type="application/json")
    assert response.status_code in (200, 400), response.data
    assert submitted, "the call handed no decision to the writer"
    decision = submitted[-1]
    record = _json(decision.as_record())
    assert read_back(decision).as_document() == _json(decision.as_document())
    if response.status_code == 400:
        assert decision.result is None and "format" not in record
        return
    assert record["format"] == COMPACT_FORMAT and "final_weights" not in record
    assert read_back(decision).final_weights == decision.final_weights
    if decision.final_weights:
        assert len(json.dumps(record)) < len(json.dumps(decision.as_document()))


def test_a_large_call_is_stored_compact_and_answered_whole(app, client, submitted):
    body = json.loads((FIXTURES / "nova/cpu-general-purpose.json").read_text())
    hosts = json.loads((FIXTURES / "nova/gpu-2xh100-pinned-1000-hosts.json").read_text())
    body.update(hosts=hosts["hosts"], weights=hosts["weights"])  # 1,000, the fleet's 50 known
    assert client.post("/scheduler/nova/external", json=body).status_code == 200
    decision = submitted[-1]
    document = _json(decision.as_document())
    weighers = [s for s in document["steps"] if s["kind"] == "weigher" and s.get("raw")]
    assert len(weighers) >= 3 and len(document["final_weights"]) > 10
    assert len(json.dumps(decision.as_record())) < len(json.dumps(document))
    app.extensions["cortex"].decisions.flush(DEADLINE)
    answered = client.get(f"/v1/decisions/{decision.id}").get_json()
    for key in ("hosts", "weights", "steps", "result", "final_weights"):
        assert answered[key] == document[key], key


def test_a_record_stored_whole_keeps_its_final_weights():
    # written before the compact form: its final weights are read as stored, even where
    # they are not the sum (a record of another release, or written by hand)
    record = {"service": "nova", "hosts": ["a", "b"], "weights": {"a": 1.0, "b": 0.5},
              "result": ["a", "b"], "unknown_hosts": [], "final_weights": {"a": 9.0, "b": 0.0},
              "steps": [{"name": "w", "kind": "weigher", "status": "ran", "multiplier": 1.0,
                         "raw": {"a": 1.0, "b": 0.0}, "scaled": {"a": 0.76, "b": 0.0}}]}
    decision = Decision.from_record(record)
    assert dict(decision.final_weights) == {"a": 9.0, "b": 0.0}
    assert decision.steps[0].raw == {"a": 1.0, "b": 0.0}


def test_a_host_the_promise_removed_stays_out_of_the_final_weights():
    weights, raw, multiplier = {"a": 0.5, "b": 2.0, "c": -1.0}, {"a": 3.0, "b": 0.1, "c": 1.0}, 2.0
    final = {h: math.tanh(weights[h]) + multiplier * math.tanh(raw[h]) for h in ("a", "c")}
    decision = Decision(
        "nova", hosts=("a", "b", "c"), weights=weights, result=("a", "c"),
        weighed=("a", "b", "c"), final_weights=final, status=200, outcome="ok",
        steps=(StepResult("w", "weigher", "ran", multiplier=multiplier,
                          weighed=("a", "b", "c"), values=tuple(raw.values())),
               StepResult("inflight_reservations", "filter", "ran",
                          removed={"b": "no longer fits"})))
    stored = _json(decision.as_record())
    assert stored["format"] == COMPACT_FORMAT and "final_weights" not in stored
    assert read_back(decision).final_weights == final


def test_the_writer_holds_its_records_back_while_a_call_runs(app, client, monkeypatch):
    services = app.extensions["cortex"]
    seen = []
    original = services.scheduler.schedule
    monkeypatch.setattr(services.scheduler, "schedule", lambda *args: (
        seen.append(services.decisions._in_flight), original(*args))[1])
    body = (FIXTURES / "nova/cpu-general-purpose.json").read_bytes()
    assert client.post("/scheduler/nova/external", data=body,
                       content_type="application/json").status_code == 200
    assert seen == [1] and services.decisions._in_flight == 0
    bad = client.post("/scheduler/nova/external", data=b"{", content_type="application/json")
    assert bad.status_code == 400 and services.decisions._in_flight == 0
