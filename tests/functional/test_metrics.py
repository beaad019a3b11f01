"""/metrics under gunicorn: prometheus-client's multi-process mode adds up every worker."""

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import bodies, load_body
from tests.functional.test_gunicorn import free_port, request, start_gunicorn

pytestmark = pytest.mark.functional

NAMES = ("cortex_scheduler_request_duration_seconds", "cortex_scheduler_requests",
         "cortex_pipeline_step_duration_seconds", "cortex_pipeline_hosts_removed",
         "cortex_pipeline_reordered", "cortex_knowledge_age_seconds",
         "cortex_decision_queue_depth", "cortex_decisions_dropped", "cortex_gpus_free",
         "cortex_gpus_stranded", "cortex_host_utilization_ratio")


def scrape(base):
    status, raw = request(f"{base}/metrics")
    assert status == 200
    return {f.name: f for f in text_string_to_metric_families(raw.decode())}


def total(families, name, suffix="_total", **labels):
    return sum(s.value for s in families[name].samples if s.name == name + suffix
               and all(s.labels.get(k) == v for k, v in labels.items()))


def worker_pids(directory):
    """Pids of the processes that wrote counters (files ``counter_<pid>.db``)."""
    return {int(name[len("counter_"):-3]) for name in os.listdir(directory)
            if name.startswith("counter_")}


def test_metrics_add_up_both_workers_and_survive_a_dead_one(engine, database_url, tmp_path):
    port = free_port()
    directory = tmp_path / "prometheus"
    directory.mkdir()
    process, log = start_gunicorn(port, database_url, tmp_path,
                                  PROMETHEUS_MULTIPROC_DIR=str(directory))
    base = f"http://127.0.0.1:{port}"
    body = load_body(bodies("nova")[0])
    sent = 0
    try:
        with ThreadPoolExecutor(max_workers=16) as pool:
            while len(worker_pids(directory)) < 2 or sent < 40:
                statuses = list(pool.map(lambda _: request(f"{base}/scheduler/nova/external",
                                                           body)[0], range(40)))
                assert statuses == [200] * 40
                sent += 40
                assert sent < 2000, "one worker served everything"
        pids = worker_pids(directory)
        assert len(pids) == 2
        for _ in range(4):  # whichever worker answers the scrape, it shows both
            families = scrape(base)
            assert all(name in families for name in NAMES), sorted(families)
            assert total(families, "cortex_scheduler_requests", service="nova") == sent
            assert total(families, "cortex_scheduler_request_duration_seconds", "_count") == sent
            assert total(families, "cortex_pipeline_reordered") == sent
        assert [n for n in os.listdir(directory)
                if "livesum" in n and f"_{sorted(pids)[0]}.db" in n]
        os.kill(sorted(pids)[0], signal.SIGKILL)  # gunicorn replaces it; child_exit runs
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(
                f"_{sorted(pids)[0]}.db" in n and "livesum" in n for n in os.listdir(directory)):
            time.sleep(0.2)
        assert not [n for n in os.listdir(directory)
                    if "livesum" in n and f"_{sorted(pids)[0]}.db" in n]
        families = scrape(base)
        assert total(families, "cortex_scheduler_requests", service="nova") == sent
        age = families["cortex_knowledge_age_seconds"].samples
        assert [s.labels for s in age] == [{"source": "database"}] and age[0].value < 60
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=20)
    assert "Traceback" not in log.read_text(), log.read_text()
