"""The scheduling timeline: its SQL bucketing (PostgreSQL and SQLite) and its dashboard page.

The store's counts are checked on the session's PostgreSQL database and on a SQLite
file (the embedded default ``cortex-api --demo`` runs on), with decisions at fixed
instants around the bucket edges. The page is read through the test client with
decisions of made-up pipelines (``tl-...``) recorded a few minutes ago; the browser
test (tests/functional/test_browser.py) draws the same in Chromium.
"""

import hashlib
import html
import re
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import delete, event, insert, literal_column, select
from sqlalchemy.dialects import mysql
from sqlalchemy.exc import CompileError

from cortex.dashboard import timeline as drawn
from cortex.db import migrate
from cortex.db.engine import make_engine
from cortex.db.models import Decision as DecisionRow
from cortex.decision import Decision
from cortex.ids import new_uuid
from cortex.store import timeline
from cortex.store.timeline import EpochBucket, bucket_seconds, decision_timeline
from tests.api.test_contract import assert_error
from tests.conftest import REPO, demo_database

#: A fixed instant, 30 s into a minute; nothing compares it with the real clock.
NOW = datetime(2001, 2, 3, 4, 5, 30, tzinfo=UTC)
STATUSES = {"ok": 200, "simulated": 200, "rejected": 400, "error": 503}


def decision_rows(specs):
    """Rows of the decisions table for ``(created_at, service, pipeline, outcome)`` specs.

    Each is a real decision's row (its record readable by the API), without steps.
    """
    return [Decision(service, pipeline=pipeline, outcome=outcome, status=STATUSES[outcome],
                     detail=None if outcome in ("ok", "simulated") else f"{outcome} on purpose",
                     id=new_uuid(), created_at=at, duration_ms=1.0).as_row()
            for at, service, pipeline, outcome in specs]


def insert_decisions(connection, specs):
    """Insert decisions (see :func:`decision_rows`); their ids."""
    rows = decision_rows(specs)
    connection.execute(insert(DecisionRow), rows)
    return [r["id"] for r in rows]


def recent_specs(now):
    """Decisions of several services and outcomes in the last hour, one 3 h before ``now``.

    ``nova · tl-gpu-a``: 3 ok and 1 refused 2 min ago, 2 errors 5 min ago, 1 ok 3 h ago;
    ``cinder · tl-vol-b``: 2 ok 10 min ago; manila: 1 refused before a pipeline, 7 min ago.
    """
    ago = lambda **kw: now - timedelta(**kw)  # noqa: E731
    return ([(ago(minutes=2), "nova", "tl-gpu-a", "ok")] * 3
            + [(ago(minutes=2), "nova", "tl-gpu-a", "rejected")]
            + [(ago(minutes=5), "nova", "tl-gpu-a", "error")] * 2
            + [(ago(hours=3), "nova", "tl-gpu-a", "ok")]
            + [(ago(minutes=10), "cinder", "tl-vol-b", "ok")] * 2
            + [(ago(minutes=7), "manila", None, "rejected")])


@pytest.fixture(scope="module")
def own_database():
    """A demo-fleet database of this module's own: the timeline counts every decision in
    its window, and the session database holds whatever the tests before recorded."""
    with demo_database("timeline") as found:
        yield found


@pytest.fixture(scope="module")
def database_url(own_database):
    return own_database[0]


@pytest.fixture(scope="module")
def engine(own_database):
    return own_database[1]


def sparse(counted):
    """``{key: {bucket: count}}`` of a Timeline, empty buckets left out."""
    return {key: {i: n for i, n in enumerate(counts) if n}
            for key, counts in counted.counts.items()}


# -- the store: buckets in SQL ---------------------------------------------------------------

@pytest.fixture(params=["session-database", "sqlite"])
def connection(request, tmp_path):
    """A connection to the session's database (rolled back) or to a fresh SQLite file."""
    if request.param == "session-database":
        yield request.getfixturevalue("db")
        return
    engine = make_engine(f"sqlite:///{tmp_path / 'timeline.sqlite'}")
    migrate.upgrade(engine)
    with engine.connect() as connection:
        yield connection
    engine.dispose()


def test_bucket_width_keeps_every_window_within_the_bucket_cap():
    assert [bucket_seconds(h) for h in (1, 2, 3, 6, 24, 168, 720)] == [
        60, 60, 120, 300, 900, 7200, 21600]
    for hours in range(1, timeline.MAX_HOURS + 1):
        step = bucket_seconds(hours)
        assert step in timeline.STEPS and -(-hours * 3600 // step) <= timeline.MAX_BUCKETS


def test_decisions_land_in_their_minute_and_the_edges_hold(connection):
    insert_decisions(connection, [
        (datetime(2001, 2, 3, 4, 5, 10, tzinfo=UTC), "nova", "kvm-a", "ok"),
        (datetime(2001, 2, 3, 4, 5, 10, tzinfo=UTC), "nova", "kvm-a", "ok"),
        (datetime(2001, 2, 3, 4, 5, 59, 999000, tzinfo=UTC), "nova", "kvm-a", "rejected"),
        (datetime(2001, 2, 3, 3, 6, tzinfo=UTC), "nova", "kvm-a", "ok"),  # first bucket
        (datetime(2001, 2, 3, 3, 5, 59, 999000, tzinfo=UTC), "nova", "kvm-a", "ok"),  # before
        (datetime(2001, 2, 3, 4, 6, tzinfo=UTC), "nova", "kvm-a", "error"),  # after now's minute
        (datetime(2001, 2, 3, 4, 0, tzinfo=UTC), "cinder", None, "rejected"),
        (datetime(2001, 2, 3, 3, 30, 30, tzinfo=UTC), "nova", "kvm-b", "error"),
        (datetime(2001, 2, 3, 3, 30, 31, tzinfo=UTC), "nova", "kvm-b", "error"),
        (datetime(2001, 2, 3, 3, 30, 59, tzinfo=UTC), "nova", "kvm-b", "simulated"),
    ])
    counted = decision_timeline(connection, 1, NOW)
    assert (counted.start, counted.step, counted.buckets) == (
        datetime(2001, 2, 3, 3, 6, tzinfo=UTC), 60, 60)
    assert counted.end == datetime(2001, 2, 3, 4, 6, tzinfo=UTC)
    assert sparse(counted) == {
        ("cinder", None, "rejected"): {54: 1},
        ("nova", "kvm-a", "ok"): {0: 1, 59: 2},
        ("nova", "kvm-a", "rejected"): {59: 1},
        ("nova", "kvm-b", "error"): {24: 2},
        ("nova", "kvm-b", "simulated"): {24: 1},
    }
    assert all(len(c) == 60 for c in counted.counts.values())
    assert sparse(decision_timeline(connection, 1, NOW, service="cinder")) == {
        ("cinder", None, "rejected"): {54: 1}}
    assert set(decision_timeline(connection, 1, NOW, pipeline="kvm-b").counts) == {
        ("nova", "kvm-b", "error"), ("nova", "kvm-b", "simulated")}
    assert decision_timeline(connection, 1, NOW, service="manila").counts == {}


def test_a_day_is_counted_in_quarter_hours_aligned_to_the_clock(connection):
    insert_decisions(connection, [
        (datetime(2001, 2, 2, 4, 15, tzinfo=UTC), "manila", "share", "ok"),  # first bucket
        (datetime(2001, 2, 2, 4, 14, 59, tzinfo=UTC), "manila", "share", "ok"),  # before
        (datetime(2001, 2, 3, 4, 14, 59, tzinfo=UTC), "manila", "share", "ok"),  # last bucket
        (datetime(2001, 2, 3, 0, 7, tzinfo=UTC), "manila", "share", "error"),
    ])
    counted = decision_timeline(connection, 24, NOW)
    assert (counted.start, counted.step, counted.buckets) == (
        datetime(2001, 2, 2, 4, 15, tzinfo=UTC), 900, 96)
    assert sparse(counted) == {("manila", "share", "error"): {79: 1},
                               ("manila", "share", "ok"): {0: 1, 95: 1}}


def test_one_grouped_query_and_the_record_json_is_never_read(connection):
    insert_decisions(connection, [(NOW - timedelta(minutes=m), "nova", "kvm-a", "ok")
                                  for m in range(30)])
    statements = []
    listener = lambda *args: statements.append(args[2])  # noqa: E731  (conn, cursor, sql, ...)
    event.listen(connection, "before_cursor_execute", listener)
    try:
        counted = decision_timeline(connection, 1, NOW)
    finally:
        event.remove(connection, "before_cursor_execute", listener)
    assert sum(counted.counts["nova", "kvm-a", "ok"]) == 30
    assert len(statements) == 1
    sql = statements[0].lower()
    assert "group by" in sql and "record" not in sql and "count(" in sql


@pytest.mark.parametrize("hours", [0, 721, -1, 1.5, "1", True, None])
def test_hours_out_of_range_is_a_value_error(db, hours):
    with pytest.raises(ValueError, match="hours"):
        decision_timeline(db, hours, NOW)


def test_a_naive_now_and_an_unknown_dialect_are_refused(db):
    with pytest.raises(ValueError, match="aware"):
        decision_timeline(db, 1, NOW.replace(tzinfo=None))
    bucket = EpochBucket(DecisionRow.created_at, literal_column("60"))
    with pytest.raises(CompileError, match="mysql"):
        select(bucket).compile(dialect=mysql.dialect())


# -- the page --------------------------------------------------------------------------------

def page(client, path):
    response = client.get(path)
    assert response.status_code == 200, response.get_data(as_text=True)[:500]
    assert response.mimetype == "text/html"
    return html.unescape(response.get_data(as_text=True))


@pytest.fixture
def recorded(engine):
    """The decisions of :func:`recent_specs`, committed for the app; deleted afterwards."""
    with engine.begin() as connection:
        ids = insert_decisions(connection, recent_specs(datetime.now(UTC)))
    yield ids
    with engine.begin() as connection:
        connection.execute(delete(DecisionRow).where(DecisionRow.id.in_(ids)))


def totals_row(text, name):
    """The cells of the totals table's row of ``name``: (ok, simulated, rejected, error, total)."""
    row = re.search(rf"<tr><td><a [^>]*>{re.escape(name)}</a></td>(.*?)</tr>", text, re.S)
    assert row, f"no totals row for {name}"
    return tuple(int(n) for n in re.findall(r'<td class="num[^"]*">(?:<a [^>]*>)?(\d+)',
                                            row.group(1)))


def attributes(text, css):
    """The numeric attributes of each SVG rect of class ``css``."""
    return [{k: float(v) for k, v in re.findall(r'(x|y|width|height)="([\d.]+)"', m)}
            for m in re.findall(rf'<rect class="{css}"([^>]*)>', text)]


def test_timeline_stacks_a_pipelines_decisions_and_marks_refusals_and_errors(client, recorded):
    text = page(client, "/ui/timeline?pipeline=tl-gpu-a")
    svg = re.search(r'<svg class="chart" id="timeline-chart".*?</svg>', text, re.S).group(0)
    plot_h = drawn._CHART_H - drawn._TOP_MARGIN - drawn._BOTTOM
    # one bucket: 3 ok under 1 refusal; another: 2 errors. The tallest stack (4) -> 5.
    ok, refused, errors = (attributes(svg, f"seg {css}") for css in ("s0", "rejected", "error"))
    assert len(ok) == len(refused) == len(errors) == 1
    assert ok[0]["height"] == pytest.approx(3 / 5 * plot_h, abs=0.01)
    assert refused[0]["height"] == pytest.approx(1 / 5 * plot_h, abs=0.01)
    assert errors[0]["height"] == pytest.approx(2 / 5 * plot_h, abs=0.01)
    assert refused[0]["y"] + refused[0]["height"] == pytest.approx(ok[0]["y"], abs=0.02)
    assert ok[0]["x"] > errors[0]["x"]  # 2 min ago is right of 5 min ago
    assert svg.count('class="mark rejected"') == 1 and svg.count('class="mark error"') == 1
    assert "2 error (503)" in svg and "nova · tl-gpu-a: 3 ok" in svg  # the tooltips
    assert len(attributes(svg, "hover")) == 2
    assert totals_row(text, "nova · tl-gpu-a") == (3, 0, 1, 2, 6)
    assert "cinder · tl-vol-b" not in text
    # six hours: the decision of 3 h ago joins, in 5-minute buckets
    six = page(client, "/ui/timeline?pipeline=tl-gpu-a&hours=6")
    assert totals_row(six, "nova · tl-gpu-a") == (4, 0, 1, 2, 7)
    assert "decisions per 5 min, last 6 h" in six


def test_timeline_names_every_service_and_filters_by_service(client, recorded):
    text = page(client, "/ui/timeline")
    assert totals_row(text, "nova · tl-gpu-a") == (3, 0, 1, 2, 6)
    assert totals_row(text, "cinder · tl-vol-b") == (2, 0, 0, 0, 2)
    assert totals_row(text, "manila · (no pipeline)")[2] >= 1
    assert '<span class="key error"></span>error (503)' in text
    assert re.search(r'class="key s\d"></span>cinder · tl-vol-b \(2\)', text)
    cinder = page(client, "/ui/timeline?service=cinder")
    assert "cinder · tl-vol-b" in cinder and "tl-gpu-a" not in cinder
    assert 'href="/ui/decisions?service=nova&pipeline=tl-gpu-a&outcome=error"' in text


def test_timeline_without_decisions_says_so(client):
    text = page(client, "/ui/timeline?pipeline=tl-nothing-here")
    assert "No decisions in this window." in text and 'class="seg' not in text


def test_the_panel_is_the_live_fragment_of_the_page(client, recorded):
    text = page(client, "/ui/timeline?pipeline=tl-gpu-a&hours=3")
    assert ('hx-get="/ui/timeline/panel?hours=3&pipeline=tl-gpu-a" '
            'hx-trigger="every 10s" hx-swap="innerHTML"') in text
    response = client.get("/ui/timeline/panel?hours=3&pipeline=tl-gpu-a")
    assert response.status_code == 200 and response.headers["Cache-Control"] == "no-store"
    panel = html.unescape(response.get_data(as_text=True))
    assert "<html" not in panel and "<header" not in panel and 'id="timeline-chart"' in panel
    assert totals_row(panel, "nova · tl-gpu-a") == (3, 0, 1, 2, 6)
    assert 'hx-trigger="every 3s"' in page(client, "/ui/timeline?refresh=3")
    assert "hx-get" not in page(client, "/ui/timeline?refresh=0")


@pytest.mark.parametrize("query", ["hours=abc", "hours=0", "hours=721", "hours=1.5",
                                   "refresh=-1", "refresh=soon", "refresh=3601",
                                   "service=glance", "pipeline=" + "p" * 256])
@pytest.mark.parametrize("path", ["/ui/timeline", "/ui/timeline/panel"])
def test_bad_query_arguments_are_a_short_400(module_client, path, query):
    response = module_client.get(f"{path}?{query}", headers={"Accept": "text/html"})
    error = assert_error(response, 400)
    assert len(response.get_data()) < 400 and query.split("=")[0] in error["detail"]


def test_navigation_links_both_pages_and_loads_the_vendored_htmx(client):
    text = page(client, "/ui")
    assert '<a href="/ui/timeline" >Timeline</a>' in text and '<a href="/ui/gpus" >GPUs</a>' in text
    script = re.search(r'<script src="/ui/static/(htmx-[\d.]+\.min\.js)" defer>', text).group(1)
    served = client.get(f"/ui/static/{script}")
    assert served.status_code == 200 and "javascript" in served.mimetype
    body = served.get_data()
    assert b'version:"2.0.11"' in body and script == "htmx-2.0.11.min.js"
    vendored = (REPO / "cortex" / "dashboard" / "static" / "VENDORED.md").read_text()
    row = next(line for line in vendored.splitlines() if line.startswith(f"| `{script}`"))
    assert hashlib.sha256(body).hexdigest() in row  # byte for byte as published
    assert "0BSD" in row and "registry.npmjs.org/htmx.org/-/htmx.org-2.0.11.tgz" in row
