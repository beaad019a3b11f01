"""Decision records are stored compact and read back whole (cortex.store.decisions).

Every bundled request body of every service runs through the API. The endpoint hands
the writer its record in the stored form; after a JSON round trip, as the database
would store it, the expanded record must be the whole one: every step's ``as_dict``
(raw and scaled per host) and the engine's final weights, as the pipeline result the
endpoint answered from has them; and ``GET /v1/decisions/<id>`` must answer the same.
"""

import copy
import json
import math
from pathlib import Path

import pytest

from cortex.api import scheduler
from cortex.store.decisions import COMPACT_FORMAT, compact_record, expand_record
from tests.waiting import DEADLINE

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BODIES = sorted(p for service in ("nova", "cinder", "manila")
                for p in (FIXTURES / service).glob("*.json"))


def _json(value):
    return json.loads(json.dumps(value))


@pytest.fixture
def submitted(app, monkeypatch):
    """The decision items the API hands to the writer, in order."""
    items = []
    writer = app.extensions["cortex"].decisions
    original = writer.submit
    monkeypatch.setattr(writer, "submit", lambda item: (items.append(copy.deepcopy(item)),
                                                       original(item))[1])
    return items


@pytest.fixture
def results(monkeypatch):
    """The pipeline results the endpoint answered from, in order."""
    found = []
    original = scheduler.schedule

    def spy(*args, **kwargs):
        answer = original(*args, **kwargs)
        found.append(answer[2])
        return answer

    monkeypatch.setattr(scheduler, "schedule", spy)
    return found


def whole(record, result):
    """The record as it would be without the stored form: per-host maps, final weights."""
    document = {k: v for k, v in record.items() if k not in ("format", "weighed")}
    return _json(document | {"steps": [s.as_dict() for s in result.steps],
                             "final_weights": result.weights})


@pytest.mark.parametrize("path", BODIES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_the_stored_record_expands_to_the_whole_one(client, submitted, results, path):
    response = client.post(f"/scheduler/{path.parent.name}/external", data=path.read_bytes(),
                           content_type="application/json")
    assert response.status_code in (200, 400), response.data
    assert submitted, "the call handed no decision to the writer"
    record = submitted[-1]["record"]
    stored = _json(compact_record(_json(record)))
    if response.status_code == 400:
        assert not results and expand_record(stored) == _json(record)
        return
    expected = whole(record, results[-1])
    assert stored["format"] == COMPACT_FORMAT and "final_weights" not in stored
    assert expand_record(stored) == expected
    if expected["final_weights"]:
        assert len(json.dumps(stored)) < len(json.dumps(expected))


def test_a_large_call_is_stored_compact_and_answered_whole(app, client, submitted,
                                                          results):
    body = json.loads((FIXTURES / "nova/cpu-general-purpose.json").read_text())
    hosts = json.loads((FIXTURES / "nova/gpu-2xh100-pinned-1000-hosts.json").read_text())
    body.update(hosts=hosts["hosts"], weights=hosts["weights"])  # 1,000, the fleet's 50 known
    assert client.post("/scheduler/nova/external", json=body).status_code == 200
    item = submitted[-1]
    record = whole(item["record"], results[-1])
    weighers = [s for s in record["steps"] if s["kind"] == "weigher" and s.get("raw")]
    assert len(weighers) >= 3 and len(record["final_weights"]) > 10
    stored = compact_record(_json(item["record"]))
    assert len(json.dumps(stored)) < len(json.dumps(record))
    app.extensions["cortex"].decisions.flush(DEADLINE)
    answered = client.get(f"/v1/decisions/{item['id']}").get_json()
    for key in ("hosts", "weights", "steps", "result", "final_weights"):
        assert answered[key] == record[key], key


def test_a_record_it_cannot_rebuild_is_stored_as_built():
    record = {"hosts": ["a", "b"], "weights": {"a": 1.0, "b": 0.5}, "result": ["a", "b"],
              "unknown_hosts": [], "final_weights": {"a": 9.0, "b": 0.0},  # not the sum
              "steps": [{"name": "w", "kind": "weigher", "status": "ran", "multiplier": 1.0,
                         "raw": {"a": 1.0, "b": 0.0}, "scaled": {"a": 0.76, "b": 0.0}}]}
    assert compact_record(record) is record
    assert expand_record(record) == record


def test_a_host_the_promise_removed_stays_out_of_the_final_weights():
    weights, raw, multiplier = {"a": 0.5, "b": 2.0, "c": -1.0}, {"a": 3.0, "b": 0.1, "c": 1.0}, 2.0
    scaled = {h: multiplier * math.tanh(r) for h, r in raw.items()}
    final = {h: math.tanh(weights[h]) + scaled[h] for h in ("a", "c")}
    record = {"hosts": ["a", "b", "c"], "weights": weights, "result": ["a", "c"],
              "unknown_hosts": [], "final_weights": final,
              "steps": [{"name": "w", "kind": "weigher", "status": "ran",
                         "multiplier": multiplier, "raw": raw, "scaled": scaled},
                        {"name": "inflight_reservations", "kind": "filter", "status": "ran",
                         "removed": {"b": "no longer fits"}}]}
    stored = _json(compact_record(record))
    assert stored["format"] == COMPACT_FORMAT and "final_weights" not in stored
    assert expand_record(stored) == record
