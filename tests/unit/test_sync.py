"""Sync pieces without servers: schedules, source choice, queries file, host names, snapshots."""

import json
import random

import pytest
from sqlalchemy import select

from cortex import conf as config
from cortex.cmd import manage
from cortex.cmd import sync as sync_cmd
from cortex.db import migrate, models
from cortex.db.engine import make_engine
from cortex.sync.leader import LeaderLock, source_lock_id
from cortex.sync.loop import Schedule, SyncLoop
from cortex.sync.runner import RunResult, run_source
from cortex.sync.snapshot import SnapshotTable, replace_rows
from cortex.sync.source import Source
from cortex.sync.sources import enabled_sources
from cortex.sync.sources.prometheus import (
    HostResolver,
    load_queries,
    normalise_host,
    short_name,
)
from cortex.sync.sources.storage import gigabytes
from cortex.sync.status import SyncMetrics


def test_schedule_waits_an_interval_with_jitter_after_success():
    rng = random.Random(7)
    schedule = Schedule(interval=60, jitter=0.1)
    dues = [schedule.after(True, 1000.0, rng) - 1000.0 for _ in range(200)]
    assert all(54.0 <= d <= 66.0 for d in dues)
    assert max(dues) - min(dues) > 6, "jitter spreads the runs"


def test_schedule_backs_off_exponentially_and_resets():
    schedule = Schedule(interval=60, jitter=0.0, backoff_initial=5, backoff_max=30)
    rng = random.Random(1)
    waits = [schedule.after(False, 0.0, rng) for _ in range(6)]
    assert waits == [5, 10, 20, 30, 30, 30] and schedule.failures == 6
    assert schedule.after(True, 0.0, rng) == 60 and schedule.failures == 0


class FakeLock:
    def __init__(self, leading):
        self.leading = leading
        self.released = False

    def try_acquire(self):
        return self.leading

    def held(self):
        return self.leading

    def release(self):
        self.released = True


class Named(Source):
    def __init__(self, name):
        self.name = name

    def sync(self, ctx):
        raise AssertionError("run_source is replaced in these tests")


def loop_with(monkeypatch, lock, outcomes):
    calls = []

    def fake_run(engine, source, batch_size, metrics):
        calls.append(source.name)
        ok = outcomes.get(source.name, True)
        return RunResult(source.name, 1, 0, 0.0, None if ok else "boom")

    monkeypatch.setattr("cortex.sync.loop.run_source", fake_run)
    clock = [0.0]
    schedules = {"nova": Schedule(10, 0.0), "placement": Schedule(30, 0.0, 5, 100)}
    loop = SyncLoop(None, [Named("nova"), Named("placement")], schedules, lock, SyncMetrics(),
                    clock=lambda: clock[0], rng=random.Random(0))
    return loop, calls, clock


def test_the_leader_runs_due_sources_and_backs_off_a_failing_one(monkeypatch):
    loop, calls, clock = loop_with(monkeypatch, FakeLock(True), {"placement": False})
    assert loop._lead()
    assert loop.run_due() == 5.0 and calls == ["nova", "placement"]
    clock[0] = 5.0
    loop.run_due()
    assert calls[-1] == "placement" and loop.schedules["placement"].next_due == 15.0
    clock[0] = 10.0
    loop.run_due()
    assert calls[-1] == "nova"
    assert loop.metrics.leader._value.get() == 1


def test_a_standby_never_syncs_and_gives_nothing_back(monkeypatch):
    lock = FakeLock(False)
    loop, calls, _ = loop_with(monkeypatch, lock, {})
    assert not loop._lead() and loop.standby_poll == 5.0
    loop.stop()
    loop.run()
    assert calls == [] and lock.released


def test_source_locks_differ_from_each_other_and_from_the_leader_lock():
    ids = {source_lock_id(n) for n in ("nova", "placement", "cinder", "manila", "keystone")}
    assert len(ids) == 5 and all(0 < i < 2 ** 63 for i in ids)


def test_enabled_sources_defaults_and_errors():
    plain = config.load(environ={})
    assert enabled_sources(plain) == ("nova", "placement", "cinder", "manila", "keystone")
    with_prometheus = plain.with_overrides({"prometheus.url": "http://prometheus:9090"})
    assert enabled_sources(with_prometheus)[-1] == "prometheus"
    chosen = plain.with_overrides({"sync.sources": "placement, nova,placement"})
    assert enabled_sources(chosen) == ("placement", "nova")
    with pytest.raises(config.ConfigError, match=r"\[sync\] sources: 'glance' is not allowed"):
        plain.with_overrides({"sync.sources": "nova,glance"})


def test_the_shipped_queries_file_is_valid():
    queries = load_queries(config.shipped_file("prometheus-queries.yaml"))
    names = {q.feature for q in queries}
    assert {"gpu.utilization", "gpu.framebuffer_used_bytes", "gpu.framebuffer_free_bytes",
            "gpu.power_watts", "gpu.temperature_celsius", "gpu.xid_errors", "cpu.busy",
            "memory.available_bytes", "cpu.steal"} <= names
    assert all(q.host_labels[0] == "Hostname" for q in queries)


@pytest.mark.parametrize("text, message", [
    ("queries: [{feature: x, query: up}]", "'unit' is a required property"),
    ("queries: [{feature: 9x, query: up, unit: ratio}]", "does not match"),
    ("queries: [{feature: cpu busy, query: up, unit: ratio}]", "does not match"),
    ("queries: [{feature: x, query: up, unit: ratio, aggregate: median}]", "median"),
    ("queries: [{feature: x, query: up, unit: r}, {feature: x, query: up, unit: r}]",
     "defined twice"),
    ("queries: [{feature: x, query: up, unit: r, range: {step: 0, window: 60}}]", "0"),
    ("queries: [", "while parsing"),
])
def test_bad_queries_files_are_refused_with_the_field(tmp_path, text, message):
    path = tmp_path / "q.yaml"
    path.write_text(text)
    with pytest.raises(config.ConfigError, match=message):
        load_queries(path)


@pytest.mark.parametrize("value, normal", [
    ("cmp0001.cloud.example:9100", "cmp0001.cloud.example"), ("CMP0001", "cmp0001"),
    ("[fd00::1]:9100", "fd00::1"), ("fd00::1", "fd00::1"), ("10.0.0.1:9100", "10.0.0.1"),
])
def test_host_label_normalisation(value, normal):
    assert normalise_host(value) == normal


def test_host_resolver_matches_names_short_names_and_ips():
    resolver = HostResolver([("cmp0001", "cmp0001.cloud.example", "10.0.0.1"),
                             ("nova-compute-bb0001", "domain-c1.vc-a-0", None)])
    assert resolver.resolve("cmp0001.other.example:9100") == ("cmp0001", True)
    assert resolver.resolve("CMP0001") == ("cmp0001", True)
    assert resolver.resolve("10.0.0.1:9100") == ("cmp0001", True)
    assert resolver.resolve("domain-c1.vc-a-0") == ("nova-compute-bb0001", True)
    assert resolver.resolve("spare.cloud.example") == ("spare", False)
    assert short_name("10.0.0.1") == "10.0.0.1"


def test_cinder_capacity_words():
    assert gigabytes("infinite") == float("inf") == gigabytes("Unknown")
    assert gigabytes(None) == 0.0 and gigabytes("12.5") == 12.5


@pytest.fixture
def sqlite_engine(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'sync.sqlite'}")
    migrate.upgrade(engine)
    yield engine
    engine.dispose()


def domains(engine):
    with engine.connect() as c:
        return {r.id: r.name for r in c.execute(select(models.Domain.__table__))}


def test_snapshots_count_only_real_changes_on_the_embedded_database(sqlite_engine):
    rows = [{"id": f"d{i}", "name": f"n{i}", "enabled": True, "description": None}
            for i in range(2500)]
    with sqlite_engine.begin() as c:
        first = replace_rows(c, models.Domain, rows, ("id",), batch_size=1000)
    assert (first.rows, first.upserted, first.deleted) == (2500, 2500, 0)
    rows[5]["name"] = "renamed"
    with sqlite_engine.begin() as c:
        second = replace_rows(c, models.Domain, rows[:2000], ("id",), batch_size=1000)
    assert (second.rows, second.upserted, second.deleted) == (2000, 1, 500)
    assert len(domains(sqlite_engine)) == 2000 and domains(sqlite_engine)["d5"] == "renamed"


def test_a_scoped_snapshot_leaves_other_rows_and_keeps_what_it_is_told(sqlite_engine):
    table = models.HostFeature.__table__

    def feature(host, name, source, value):
        return {"host": host, "feature": name, "source": source, "value": value, "unit": "count",
                "observed_at": None}

    with sqlite_engine.begin() as c:
        replace_rows(c, table, [feature("a", "x", "nova", 1), feature("b", "x", "nova", 2)],
                     ("host", "feature"), scope=table.c.source == "nova")
        replace_rows(c, table, [feature("a", "y", "placement", 3)], ("host", "feature"),
                     scope=table.c.source == "placement")
        snapshot = SnapshotTable(c, table, ("host", "feature"), table.c.source == "nova")
        snapshot.keep(lambda key: key[0] == "b")
        counts = snapshot.finish()
    assert (counts.rows, counts.deleted) == (1, 1)
    with sqlite_engine.connect() as c:
        left = {(r.host, r.feature) for r in c.execute(select(table))}
    assert left == {("b", "x"), ("a", "y")}


class Failing(Source):
    name = "keystone"

    def sync(self, ctx):
        ctx.replace(models.Domain, [{"id": "half", "name": "written", "enabled": True,
                                     "description": None}], ("id",))
        raise RuntimeError("the API went away")


def test_a_failed_run_is_recorded_and_its_writes_roll_back(sqlite_engine):
    metrics = SyncMetrics()
    result = run_source(sqlite_engine, Failing(), metrics=metrics)
    assert not result.ok and result.error == "RuntimeError: the API went away"
    assert domains(sqlite_engine) == {}
    with sqlite_engine.connect() as c:
        status = c.execute(select(models.SyncStatus.__table__)).one()
    assert status.consecutive_failures == 1 and status.last_success_at is None
    assert metrics.failures.labels("keystone")._value.get() == 1
    assert LeaderLock(sqlite_engine).try_acquire(), "SQLite has a single process: it leads"


def test_manage_sync_needs_once_and_a_known_source(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CORTEX_DATABASE_CONNECTION", f"sqlite:///{tmp_path / 'c.sqlite'}")
    monkeypatch.delenv("CORTEX_CONFIG_FILE", raising=False)
    assert manage.main(["sync"]) == 2
    assert "--once" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        manage.main(["sync", "--once", "--source", "glance"])
    assert manage.main(["sync", "--once", "--source", "prometheus"]) == 2
    assert "[prometheus] url is required" in capsys.readouterr().err


def test_cortex_sync_refuses_a_bad_configuration(tmp_path, capsys):
    path = tmp_path / "c.conf"
    path.write_text("[sync]\nsources = nova,glance\n")
    assert sync_cmd.main(["--config-file", str(path)]) == 2
    assert "glance" in capsys.readouterr().err


class StubResponse:
    def __init__(self, status, body=None, text=""):
        self.status_code, self._body, self.text = status, body, text

    def json(self):
        if self._body is None:
            raise ValueError("not JSON")
        return self._body


class StubSession:
    def __init__(self, response):
        self.response = response

    def get(self, url, params, timeout):
        return self.response


def call(response, endpoint="query"):
    from cortex.sync.source import SyncContext
    from cortex.sync.sources.prometheus import PrometheusSource, Query

    source = PrometheusSource("http://prometheus:9090/", [], session=StubSession(response))
    ctx = SyncContext(None)
    query = Query("gpu_utilization", "DCGM_FI_DEV_GPU_UTIL", "ratio", ("Hostname",))
    return source._call(ctx, endpoint, {"query": query.query}, query.feature), ctx


def test_prometheus_warnings_are_kept_with_the_data():
    data, ctx = call(StubResponse(200, {"status": "success", "warnings": ["partial response"],
                                        "data": {"resultType": "vector", "result": []}}))
    assert data["resultType"] == "vector"
    assert ctx.detail["warnings"] == ["gpu_utilization: partial response"]


@pytest.mark.parametrize("response, error, text", [
    (StubResponse(400, {"status": "error", "errorType": "bad_data", "error": "parse error"}),
     "QueryRejected", "bad_data: parse error (HTTP 400)"),
    (StubResponse(422, {"status": "error", "errorType": "execution", "error": "too many"}),
     "QueryRejected", "execution: too many"),
    (StubResponse(503, {"status": "error", "errorType": "unavailable", "error": "shutting"}),
     "SourceError", "unavailable: shutting (HTTP 503)"),
    (StubResponse(502, None, "<html>Bad Gateway</html>"), "SourceError", "HTTP 502, not JSON"),
    (StubResponse(200, {"status": "success", "data": None}), "SourceError", "no error text"),
])
def test_prometheus_error_envelopes(response, error, text):
    from cortex.sync.openstack import SourceError

    with pytest.raises(SourceError, match=r".*") as caught:
        call(response)
    assert type(caught.value).__name__ == error and text in str(caught.value)


def test_network_series_that_name_a_leaf_and_a_spine_alike_or_tie_are_settled():
    from cortex.sync.sources.prometheus_network import (
        SeriesLocation,
        Skipped,
        resolve_locations,
    )

    skipped = Skipped()
    found = [SeriesLocation("h1", "l1", "s1", None, None),
             SeriesLocation("h2", "l1", "s2", None, None),  # a tie with h1: sorts after
             SeriesLocation("h3", "f-spine", "s9", None, None),  # leaf named as a spine
             SeriesLocation("h4", "f-leaf", "s7", "b", 100.0),  # the file's leaf wins
             SeriesLocation("h5", "l5", "f-spine", None, None),  # the file's spine: fine
             SeriesLocation("h7", "x", "y", None, None),  # y a spine here, a leaf next:
             SeriesLocation("h8", "y", "z", None, None)]  # which is wrong cannot be told
    locations, earlier = resolve_locations(found, {"h6"}, {"f-leaf": "leaf",
                                                            "f-spine": "spine"}, skipped)
    assert locations == {"h1": SeriesLocation("h1", "l1", "s1", None, None),
                         "h4": SeriesLocation("h4", "f-leaf", None, None, None),
                         "h5": SeriesLocation("h5", "l5", "f-spine", None, None)}
    assert (earlier, skipped.conflicting, skipped.malformed) == (0, 4, 0)


@pytest.mark.parametrize("body", [
    b'{"servers": [{"id": "a", "name": "vm \\u00e9", "ram": 2048, "ratio": 1.5}]}',
    b'{"big": 123456789012345678901234567890}',  # beyond 64 bits: orjson would read a float
    b'{"n": NaN}',                               # the standard library's extension
])
def test_api_bodies_decode_as_the_standard_library_decodes_them(body):
    import requests

    from cortex.sync.openstack import decode_json

    response = requests.Response()
    response._content = body
    response.encoding = "utf-8"
    decoded, expected = decode_json(response), response.json()
    assert json.dumps(decoded) == json.dumps(expected)
    assert [type(v) for v in decoded.values()] == [type(v) for v in expected.values()]


def test_a_body_that_is_not_json_raises_value_error():
    import requests

    from cortex.sync.openstack import decode_json

    response = requests.Response()
    response._content = b"<html>proxy error</html>"
    response.encoding = "utf-8"
    with pytest.raises(ValueError):
        decode_json(response)
