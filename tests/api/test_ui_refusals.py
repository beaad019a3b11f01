"""The last day's calls that found no host, by cause: the decision log's ``cause`` and its panel.

Decisions of made-up pipelines (``rf-...``) go through the decision writer into the
session's database with their causes (:attr:`cortex.decision.Decision.refusal`, from
their steps); the store counts them in SQL and the timeline page shows the table.
"""

import html
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from types import MappingProxyType

import pytest
from sqlalchemy import delete, select

from cortex.db.models import Decision as DecisionRow
from cortex.decision import Decision, StepResult
from cortex.ids import new_uuid
from cortex.services import history
from cortex.store.decisions import DecisionStore, DecisionWriter, refusals_by_cause
from tests.api.test_contract import post
from tests.api.test_group_promises import reserving  # noqa: F401 - a fixture
from tests.api.test_reservations import FLAVOR, HOST
from tests.fakes import nova_body
from tests.waiting import DEADLINE


def removed_by(step, *hosts):
    return StepResult(step, "filter", "ran", hosts_in=len(hosts),
                      removed=MappingProxyType(dict.fromkeys(hosts, "no room")))


def refusal(pipeline, step, at, service="nova", outcome="ok"):
    """A call offering two hosts that ``step`` removed, answered 200 with no host."""
    steps = (removed_by("filter_correct_az"), removed_by(step, "h1", "h2")) if step else ()
    return Decision(service, hosts=("h1", "h2") if step else (), pipeline=pipeline, result=(),
                    steps=steps, weighed=(), status=200, outcome=outcome, id=new_uuid(),
                    created_at=at, duration_ms=1.0)


def answered(pipeline, at):
    return Decision("nova", hosts=("h1",), weights={"h1": 0.0}, pipeline=pipeline,
                    result=("h1",), weighed=("h1",), status=200, outcome="ok", id=new_uuid(),
                    created_at=at, duration_ms=1.0)


@pytest.fixture
def recorded(engine):
    """Refusals of ``rf-gpu`` and ``rf-cpu`` (and calls that do not count), written."""
    now = datetime.now(UTC)
    ago = lambda **kw: now - timedelta(**kw)  # noqa: E731
    decisions = ([refusal("rf-gpu", "filter_gpu_capacity", ago(minutes=m)) for m in (1, 2, 3)]
                 + [refusal("rf-gpu", "filter_numa_fit", ago(hours=23))]
                 + [refusal("rf-gpu", "filter_gpu_capacity", ago(hours=25))]  # a day ago
                 + [refusal("rf-gpu", "filter_gpu_capacity", ago(minutes=4),
                            outcome="simulated")]
                 + [answered("rf-gpu", ago(minutes=1))]
                 + [refusal("rf-cpu", None, ago(minutes=5))]
                 + [refusal("rf-cpu", "filter_has_enough_capacity", ago(minutes=6),
                            service="cinder")])
    writer = DecisionWriter(engine)
    for decision in decisions:
        assert writer.submit(decision)
    writer.close()
    assert writer.written == len(decisions)
    yield now
    with engine.begin() as connection:
        connection.execute(delete(DecisionRow).where(
            DecisionRow.id.in_([d.id for d in decisions])))


def test_the_writer_stores_the_cause_of_refusals_alone(engine, recorded):
    with engine.connect() as connection:
        rows = connection.execute(select(DecisionRow.pipeline, DecisionRow.cause).where(
            DecisionRow.pipeline.in_(["rf-gpu", "rf-cpu"]))).all()
    causes = sorted((p, c or "") for p, c in rows)
    assert causes == sorted([("rf-gpu", "filter_gpu_capacity")] * 5
                            + [("rf-gpu", "filter_numa_fit"), ("rf-gpu", ""),
                               ("rf-cpu", "no_candidates"),
                               ("rf-cpu", "filter_has_enough_capacity")])


def test_the_last_day_is_counted_by_service_pipeline_and_cause(engine, recorded):
    found = [r for r in history.refusals_by_cause(engine, recorded + timedelta(seconds=1))
             if r["pipeline"] in ("rf-gpu", "rf-cpu")]
    assert found == [
        {"service": "nova", "pipeline": "rf-gpu", "cause": "filter_gpu_capacity", "count": 3},
        {"service": "cinder", "pipeline": "rf-cpu", "cause": "filter_has_enough_capacity",
         "count": 1},
        {"service": "nova", "pipeline": "rf-cpu", "cause": "no_candidates", "count": 1},
        {"service": "nova", "pipeline": "rf-gpu", "cause": "filter_numa_fit", "count": 1}]
    with engine.connect() as connection:
        cinder = refusals_by_cause(connection, recorded - timedelta(hours=1),
                                   recorded + timedelta(seconds=1), service="cinder",
                                   pipeline="rf-cpu")
    assert [r["count"] for r in cinder] == [1]


def refusal_rows(text):
    """``[(service, pipeline, cause, count)]`` of the page's refusals table."""
    table = re.search(r'<table class="grid" id="timeline-refusals">(.*?)</table>', text, re.S)
    assert table, "no refusals table"
    return [(s, p, c, int(n)) for s, p, c, n in re.findall(
        r"<tr><td>([^<]*)</td><td>([^<]*)</td><td><code>([^<]*)</code></td>\s*"
        r'<td class="num"><a [^>]*>(\d+)</a></td></tr>', table.group(1))]


def page(client, path):
    response = client.get(path)
    assert response.status_code == 200, response.get_data(as_text=True)[:500]
    return html.unescape(response.get_data(as_text=True))


def test_the_timeline_shows_the_last_days_refusals_by_cause(client, recorded):
    text = page(client, "/ui/timeline?pipeline=rf-gpu")
    assert "No host found, last 24 h, by cause" in text
    assert refusal_rows(text) == [("nova", "rf-gpu", "filter_gpu_capacity", 3),
                                  ("nova", "rf-gpu", "filter_numa_fit", 1)]
    # the live panel carries it too, whatever the chart's window
    panel = page(client, "/ui/timeline/panel?pipeline=rf-cpu&hours=1")
    assert refusal_rows(panel) == [("cinder", "rf-cpu", "filter_has_enough_capacity", 1),
                                   ("nova", "rf-cpu", "no_candidates", 1)]
    assert refusal_rows(page(client, "/ui/timeline?pipeline=rf-cpu&service=cinder")) == [
        ("cinder", "rf-cpu", "filter_has_enough_capacity", 1)]


def test_no_refusal_says_so(client):
    text = page(client, "/ui/timeline?pipeline=rf-nothing-here")
    assert refusal_rows(text) == []
    assert "No call found no host in the last 24 h." in text


def test_a_cause_the_scheduler_named_is_stored_and_read_back(engine):
    now = datetime.now(UTC)
    named = replace(refusal("rf-named", "filter_has_enough_capacity", now), cause="reservations")
    writer = DecisionWriter(engine)
    assert writer.submit(named)
    writer.close()
    try:
        assert DecisionStore(engine).get(named.id).refusal == "reservations"
        counted = history.refusals_by_cause(engine, now + timedelta(seconds=1),
                                            pipeline="rf-named")
        assert counted == [{"service": "nova", "pipeline": "rf-named", "cause": "reservations",
                            "count": 1}]
    finally:
        with engine.begin() as connection:
            connection.execute(delete(DecisionRow).where(DecisionRow.id == named.id))



def test_a_live_refusal_is_logged_with_the_cause_the_counter_counts(reserving, engine):  # noqa: F811,E501
    """Four creates for cmp0007, which has room for three: the fourth finds the room
    promised to the others; its decision is stored with the cause ``reservations``, the
    very label ``cortex_scheduler_no_valid_host_total`` counts it under."""
    client = reserving.test_client()
    answers = [post(client, "nova", nova_body(hosts=[HOST], flavor=FLAVOR, spec={
        "instance_uuid": new_uuid()})) for _ in range(4)]
    assert [a.get_json()["hosts"] for a in answers] == [[HOST]] * 3 + [[]]
    reserving.extensions["cortex"].decisions.flush(DEADLINE)
    decision_id = answers[-1].headers["x-cortex-decision-id"]
    with engine.connect() as connection:
        assert connection.execute(select(DecisionRow.cause).where(
            DecisionRow.id == decision_id)).scalar() == "reservations"
    metrics = client.get("/metrics").get_data(as_text=True)
    assert re.search(r'cortex_scheduler_no_valid_host_total\{cause="reservations",'
                     r'pipeline="[^"]+",service="nova"\} 1\.0', metrics), metrics
