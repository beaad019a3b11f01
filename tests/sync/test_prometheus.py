"""The Prometheus source against a real Prometheus whose TSDB promtool backfilled.

Every stored sample is checked against the raw data by Prometheus's own rule: a
query at time t sees the newest raw sample at or before t within the 5-minute
lookback. Host labels come in the usual spellings (``Hostname``, ``instance``
with a port, FQDN, upper case, a host IP); NaN values, a stale series and a
query Prometheus rejects are part of the data.
"""

from __future__ import annotations

import math
import time

import pytest
from sqlalchemy import insert, select

from cortex.cmd import manage
from cortex.db import models
from cortex.sync import derive
from cortex.sync.runner import run_source
from cortex.sync.sources.prometheus import PrometheusSource, load_queries
from tests.real_servers import ServerUnavailable, start_prometheus, stop

STEP = 60
LOOKBACK = 300
QUERIES = """
queries:
  - feature: gpu_utilization
    query: DCGM_FI_DEV_GPU_UTIL / 100
    unit: ratio
    series_labels: [gpu, UUID]
    range: {step: 60, window: 3600}
  - feature: memory_available_bytes
    query: node_memory_MemAvailable_bytes
    unit: bytes
  - feature: gpu_power_watts
    query: DCGM_FI_DEV_POWER_USAGE
    unit: watts
    series_labels: [gpu]
    aggregate: sum
  - feature: gpu_temperature_celsius
    query: DCGM_FI_DEV_GPU_TEMP
    unit: celsius
    aggregate: max
  - feature: broken
    query: "sum(("
    unit: ratio
"""
HYPERVISORS = [("cmp0000", "cmp0000.cloud.example", "10.0.0.10"),
               ("cmp0001", "cmp0001.cloud.example", "10.0.0.11"),
               ("cmp0003", "cmp0003.cloud.example", "10.0.0.13")]


def raw_series(end: int) -> dict[tuple[str, str], list[tuple[int, float]]]:
    """``{(metric, labels): [(ts, value)]}``: two hours of minutely samples up to ``end``."""
    minutes = range(end - 7200, end + 1, STEP)
    series = {
        ("DCGM_FI_DEV_GPU_UTIL", 'Hostname="cmp0000",UUID="GPU-a",gpu="0"'):
            [(t, float((t // STEP) % 97)) for t in minutes],
        ("DCGM_FI_DEV_GPU_UTIL", 'Hostname="cmp0000",UUID="GPU-b",gpu="1"'):
            [(t, float((t // STEP) % 89)) for t in minutes],
        ("DCGM_FI_DEV_GPU_UTIL", 'Hostname="CMP0001.cloud.example",UUID="GPU-c",gpu="0"'):
            [(t, 50.0 + (t // STEP) % 7) for t in minutes],
        ("node_memory_MemAvailable_bytes", 'instance="cmp0000.cloud.example:9100",job="node"'):
            [(t, 2.0e11 + t % 1000) for t in minutes],
        ("node_memory_MemAvailable_bytes", 'instance="10.0.0.11:9100",job="node"'):
            [(t, 1.5e11) for t in minutes],
        ("node_memory_MemAvailable_bytes", 'instance="spare7.cloud.example:9100",job="node"'):
            [(t, 1.0e11) for t in minutes],
        ("DCGM_FI_DEV_POWER_USAGE", 'Hostname="cmp0000",gpu="0"'):
            [(t, 300.0) for t in minutes[:-1]] + [(end, math.nan)],
        ("DCGM_FI_DEV_POWER_USAGE", 'Hostname="cmp0000",gpu="1"'): [(t, 250.5) for t in minutes],
        ("DCGM_FI_DEV_GPU_TEMP", 'Hostname="cmp0000",gpu="0"'): [(t, 61.0) for t in minutes],
        ("DCGM_FI_DEV_GPU_TEMP", 'Hostname="cmp0000",gpu="1"'): [(t, 67.0) for t in minutes],
        # stale: the exporter of cmp0003 stopped half an hour ago
        ("DCGM_FI_DEV_GPU_TEMP", 'Hostname="cmp0003",gpu="0"'):
            [(t, 90.0) for t in minutes if t <= end - 1800],
    }
    return series


def openmetrics(series) -> str:
    lines, typed = [], set()
    for (metric, labels), points in sorted(series.items()):
        if metric not in typed:
            typed.add(metric)
            lines.append(f"# TYPE {metric} gauge")
        lines += [f"{metric}{{{labels}}} {'NaN' if math.isnan(v) else repr(v)} {t}"
                  for t, v in points]
    return "\n".join(lines) + "\n# EOF\n"


def seen_at(points, t: float) -> float | None:
    """The value a query at ``t`` sees: the newest raw sample in ``(t - 5 min, t]``."""
    before = [(ts, v) for ts, v in points if t - LOOKBACK < ts <= t]
    return before[-1][1] if before else None


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    """A real Prometheus over two hours of backfilled data; (url, data end, raw series)."""
    end = int(time.time() // STEP * STEP) - STEP
    series = raw_series(end)
    try:
        process, url = start_prometheus(tmp_path_factory.mktemp("prometheus"), openmetrics(series))
    except ServerUnavailable as exc:
        pytest.fail(str(exc))
    yield url, end, series
    stop(process)


@pytest.fixture
def hypervisors(sync_engine):
    with sync_engine.begin() as c:
        c.execute(insert(models.Hypervisor), [
            {"uuid": f"00000000-0000-0000-0000-00000000000{i}", "host": host, "node": node,
             "host_ip": ip, "forced_down": False}
            for i, (host, node, ip) in enumerate(HYPERVISORS)])
    return sync_engine


def source(url, tmp_path, clock, **kwargs) -> PrometheusSource:
    path = tmp_path / "queries.yaml"
    path.write_text(QUERIES)
    return PrometheusSource(url, load_queries(path), clock=clock, **kwargs)


def samples(engine) -> dict[tuple[str, str], dict[float, float]]:
    table = models.PrometheusSample.__table__
    found: dict[tuple[str, str], dict[float, float]] = {}
    with engine.connect() as c:
        for row in c.execute(select(table)):
            found.setdefault((row.host, row.series), {})[row.ts.timestamp()] = row.value
    return found


def rows(engine, model, *columns):
    with engine.connect() as c:
        return {tuple(r[:len(columns)]): r[len(columns):] for r in c.execute(
            select(*(model.__table__.c[n] for n in columns),
                   *(c_ for c_ in model.__table__.c if c_.name not in columns)))}


def expected_utilization(series, times) -> dict[tuple[str, str], dict[float, float]]:
    """What the range query must have stored, per host series, at the given times."""
    mapping = {'Hostname="cmp0000",UUID="GPU-a",gpu="0"': ("cmp0000", 'UUID="GPU-a",gpu="0"'),
               'Hostname="cmp0000",UUID="GPU-b",gpu="1"': ("cmp0000", 'UUID="GPU-b",gpu="1"'),
               'Hostname="CMP0001.cloud.example",UUID="GPU-c",gpu="0"':
                   ("cmp0001", 'UUID="GPU-c",gpu="0"')}
    expected = {}
    for labels, key in mapping.items():
        points = series[("DCGM_FI_DEV_GPU_UTIL", labels)]
        expected[key] = {t: seen_at(points, t) / 100 for t in times
                         if seen_at(points, t) is not None}
    return expected


def test_range_and_instant_queries_are_stored_sample_by_sample(prometheus, hypervisors,
                                                               tmp_path):
    url, end, series = prometheus
    now = end + 30.0
    result = run_source(hypervisors, source(url, tmp_path, lambda: now))
    assert result.ok, result.error

    grid = [float(t) for t in range(end - 3600 + STEP, end + 1, STEP)]
    assert samples(hypervisors) == expected_utilization(series, grid)

    latest = rows(hypervisors, models.PrometheusLatest, "feature", "host", "series")
    assert {k: v[1] for k, v in latest.items()} == {
        ("memory_available_bytes", "cmp0000", 'job="node"'):
            seen_at(series[("node_memory_MemAvailable_bytes",
                            'instance="cmp0000.cloud.example:9100",job="node"')], now),
        ("memory_available_bytes", "cmp0001", 'job="node"'): 1.5e11,
        ("memory_available_bytes", "spare7", 'job="node"'): 1.0e11,
        # gpu 0's newest power value is NaN: skipped
        ("gpu_power_watts", "cmp0000", 'gpu="1"'): 250.5,
        # cmp0003's temperature series is stale: Prometheus no longer returns it
        ("gpu_temperature_celsius", "cmp0000", 'gpu="0"'): 61.0,
        ("gpu_temperature_celsius", "cmp0000", 'gpu="1"'): 67.0,
    }
    assert all(v[0].timestamp() == now for v in latest.values())

    features = {k: v[1] for k, v in rows(hypervisors, models.HostFeature, "host",
                                         "feature").items()}
    utilization = expected_utilization(series, grid)
    newest_a = utilization[("cmp0000", 'UUID="GPU-a",gpu="0"')][grid[-1]]
    newest_b = utilization[("cmp0000", 'UUID="GPU-b",gpu="1"')][grid[-1]]
    window = [v for key, by_ts in utilization.items() if key[0] == "cmp0000"
              for v in by_ts.values()]
    assert features[("cmp0000", "gpu_utilization")] == pytest.approx((newest_a + newest_b) / 2)
    assert features[("cmp0000", "gpu_utilization.window_mean")] == pytest.approx(
        sum(window) / len(window))
    assert features[("cmp0000", "gpu_power_watts")] == 250.5
    assert features[("cmp0000", "gpu_temperature_celsius")] == 67.0
    assert ("cmp0003", "gpu_temperature_celsius") not in features

    # what the knowledge view's HostState.features of cmp0000 will hold
    with hypervisors.connect() as c:
        nodes = c.execute(select(models.Hypervisor.__table__)).mappings().all()
        facts = derive.node_facts(c, nodes)["00000000-0000-0000-0000-000000000000"]
    assert facts["features"] == {f: v for (h, f), v in features.items() if h == "cmp0000"}

    with hypervisors.connect() as c:
        status = c.execute(select(models.SyncStatus.__table__)).one()
    assert status.detail["failed_queries"] == ["broken"]
    assert any("broken: bad_data" in w for w in status.detail["warnings"])
    assert status.detail["unmatched_hosts"] == ["spare7.cloud.example:9100"]


def test_range_queries_are_incremental_and_retained(prometheus, hypervisors, tmp_path):
    url, end, series = prometheus
    first_now = end - 600 + 30.0
    assert run_source(hypervisors, source(url, tmp_path, lambda: first_now)).ok
    before = samples(hypervisors)
    assert max(max(s) for s in before.values()) == end - 600

    later = end + 30.0
    second = run_source(hypervisors, source(url, tmp_path, lambda: later,
                                            retention_hours=0.25))
    assert second.ok
    with hypervisors.connect() as c:
        tables = c.execute(select(models.SyncStatus.detail)).scalar_one()["tables"]
    # ten new minutes for each of the three GPU series, nothing fetched twice
    assert tables["prometheus_samples"]["upserted"] == 30
    after = samples(hypervisors)
    grid = [float(t) for t in range(end - 3600 + STEP - 600, end + 1, STEP)
            if t >= later - 900]
    assert after == expected_utilization(series, grid)


def test_cortex_manage_syncs_prometheus_with_the_real_clock(prometheus, hypervisors,
                                                            sync_database_url, tmp_path):
    url, end, series = prometheus
    queries = tmp_path / "q.yaml"
    queries.write_text(QUERIES)
    config_file = tmp_path / "cortex.conf"
    config_file.write_text(f"[database]\nconnection = {sync_database_url}\n"
                           f"[prometheus]\nurl = {url}\nqueries_file = {queries}\n")
    assert manage.main(["--config-file", str(config_file), "sync", "--once",
                        "--source", "prometheus"]) == 0
    stored = samples(hypervisors)
    times = sorted({t for by_ts in stored.values() for t in by_ts})
    assert times and all(b - a == STEP for a, b in zip(times, times[1:], strict=False))
    assert stored == expected_utilization(series, times)


def test_an_unreachable_prometheus_fails_the_run_and_keeps_the_data(prometheus, hypervisors,
                                                                    tmp_path):
    url, end, _ = prometheus
    assert run_source(hypervisors, source(url, tmp_path, lambda: end + 30.0)).ok
    before = samples(hypervisors), rows(hypervisors, models.PrometheusLatest, "feature",
                                        "host", "series")
    failed = run_source(hypervisors, source("http://127.0.0.1:9", tmp_path,
                                            lambda: end + 90.0))
    assert not failed.ok and "ConnectionError" in failed.error
    assert (samples(hypervisors), rows(hypervisors, models.PrometheusLatest, "feature", "host",
                                       "series")) == before
    with hypervisors.connect() as c:
        status = c.execute(select(models.SyncStatus.__table__)).one()
    assert status.consecutive_failures == 1 and status.last_success_at is not None
