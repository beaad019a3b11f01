"""Every bundled request body's decision on the demo fleet, as recorded.

What the pipelines decide for each body of ``tests/fixtures/{nova,cinder,manila}`` on
the demo fleet: the pipeline chosen, the answer, every step's status, reason and
removals, each weigher's multiplier and raw value per host, and the final weights.
Recorded in ``tests/fixtures/decisions/demo-fleet.json`` so that a change meant to
move code without changing behaviour can be shown
to change nothing. After a change that is meant to change decisions, record anew with
``CORTEX_RECORD_DECISIONS=1 pytest tests/api/test_recorded_decisions.py`` (the run
then fails once, so the new file is reviewed as a diff, never taken silently).
"""

import json
import os

import pytest

from cortex.api.app import create_app
from tests.api.conftest import make_conf, stop_app
from tests.conftest import FIXTURES, bodies, demo_database, load_body

RECORD = FIXTURES / "decisions" / "demo-fleet.json"
SKIP_STEP_KEYS = {"duration_ms"}  # the only thing that differs from run to run
BIG = "gpu-2xh100-pinned-1000-hosts"  # the same request as gpu-2xh100-pinned, for benches


def rounded(value):
    """``value`` with every float rounded to 9 significant digits (JSON-shaped input)."""
    if isinstance(value, float):
        return float(f"{value:.9g}")
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return value


def decision(client, service: str, body: dict) -> dict:
    """The simulated decision of one body, without durations, floats rounded."""
    answer = client.post(f"/v1/scheduler/{service}/simulate", json=body)
    assert answer.status_code == 200, answer.get_data(as_text=True)
    found = answer.get_json()
    steps = [{k: v for k, v in step.items() if k not in SKIP_STEP_KEYS}
             for step in found["steps"]]
    return rounded({"pipeline": found["pipeline"], "intent": found["intent"],
                    "hosts": found["hosts"], "unknown_hosts": found["unknown_hosts"],
                    "steps": steps, "final_weights": found["final_weights"]})


@pytest.fixture(scope="module")
def demo_client():
    """An app on a database of its own holding the demo fleet, as cortex-api --demo has."""
    with demo_database("recorded") as (url, engine):
        app = create_app(make_conf(**{"database.connection": url}), engine=engine)
        yield app.test_client()
        stop_app(app)


def test_every_bundled_body_decides_as_recorded(demo_client):
    found = {f"{service}/{path.stem}": decision(demo_client, service, load_body(path))
             for service in ("nova", "cinder", "manila")
             for path in bodies(service) if path.stem != BIG}
    if os.environ.get("CORTEX_RECORD_DECISIONS"):
        RECORD.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
        pytest.fail(f"recorded {len(found)} decisions anew in {RECORD}: review the diff")
    recorded = json.loads(RECORD.read_text())
    assert sorted(found) == sorted(recorded)
    for name, expected in recorded.items():
        assert found[name] == expected, name


def test_the_record_covers_every_bundled_body():
    recorded = json.loads(RECORD.read_text())
    expected = {f"{s}/{p.stem}" for s in ("nova", "cinder", "manila") for p in bodies(s)}
    assert set(recorded) == expected - {f"nova/{BIG}"}
    assert all(r["steps"] for r in recorded.values())
