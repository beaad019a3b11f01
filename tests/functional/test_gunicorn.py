"""End to end: gunicorn on a free loopback port serving every bundled body."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlalchemy import text

from cortex.api.schema import RequestValidator, load_openapi
from tests.conftest import REPO, bodies, load_body

pytestmark = pytest.mark.functional


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(url, body=None, method=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def start_gunicorn(port, database_url, tmp_path, **environ):
    """gunicorn with 2 workers on ``database_url``, answering /healthcheck; (process, log).

    ``environ`` adds to (or overrides) the process environment. In-flight reservations
    are off unless ``environ`` turns them on (the bodies are posted again and again).
    """
    env = os.environ | {"CORTEX_DATABASE_CONNECTION": database_url,
                        "CORTEX_SCHEDULER_RESERVATION_TTL": "0",
                        "CORTEX_WORKERS": "2", "PYTHONUNBUFFERED": "1",
                        "CORTEX_API_AUTH_STRATEGY": "noauth",
                        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / f"metrics-{port}")} | environ
    env.pop("CORTEX_CONFIG_FILE", None)
    log = tmp_path / f"gunicorn-{port}.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", str(REPO / "etc/cortex/gunicorn.conf.py"),
         "--bind", f"127.0.0.1:{port}", "cortex.wsgi:application"],
        env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=tmp_path)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if request(f"http://127.0.0.1:{port}/healthcheck")[0] == 200:
                return process, log
        except OSError:
            time.sleep(0.2)
    process.kill()
    pytest.fail(log.read_text())


@pytest.fixture
def gunicorn(engine, database_url, tmp_path):
    """gunicorn with 2 workers on the session's database (demo fleet loaded)."""
    port = free_port()
    process, log = start_gunicorn(port, database_url, tmp_path)
    yield f"http://127.0.0.1:{port}"
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=20) == 0
    text = log.read_text()
    assert "Traceback" not in text, text


def test_gunicorn_answers_every_bundled_body(gunicorn):
    validator = RequestValidator(load_openapi())
    for service in ("nova", "cinder", "manila"):
        for path in bodies(service):
            body = load_body(path)
            status, raw = request(f"{gunicorn}/scheduler/{service}/external", body)
            assert status == 200, (path.name, raw)
            answer = json.loads(raw)
            assert validator.response_errors(answer) == [], path.name
            hosts = answer["hosts"]
            assert set(hosts) <= {h["host"] for h in body["hosts"]}, path.name
            assert len(hosts) == len(set(hosts)) and hosts, path.name


def test_200_concurrent_clients_get_only_valid_answers(gunicorn):
    validator = RequestValidator(load_openapi())
    cases = [(s, load_body(p)) for s in ("nova", "cinder", "manila") for p in bodies(s)
             if "1000-hosts" not in p.name]

    def call(i):
        service, body = cases[i % len(cases)]
        status, raw = request(f"{gunicorn}/scheduler/{service}/external", body)
        return body, status, raw

    with ThreadPoolExecutor(max_workers=200) as pool:
        results = list(pool.map(call, range(400)))
    for body, status, raw in results:
        assert status == 200, raw
        hosts = json.loads(raw)["hosts"]
        assert validator.response_errors({"hosts": hosts}) == []
        assert set(hosts) <= {h["host"] for h in body["hosts"]}
        assert len(hosts) == len(set(hosts))


def test_sigterm_flushes_queued_decisions(engine, database_url, tmp_path):
    port = free_port()
    process, log = start_gunicorn(port, database_url, tmp_path)
    base = f"http://127.0.0.1:{port}"
    body = load_body(bodies("nova")[0])
    marker = f"sigterm-{port}"
    body["context"]["request_id"] = marker
    for _ in range(20):
        assert request(f"{base}/scheduler/nova/external", body)[0] == 200
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=20) == 0
    with engine.connect() as connection:
        count = connection.execute(text("SELECT count(*) FROM decisions WHERE request_id = :r"),
                                   {"r": marker}).scalar()
    assert count == 20, Path(log).read_text()


def test_gunicorn_contract_errors(gunicorn):
    status, raw = request(f"{gunicorn}/scheduler/nova/external", method="GET")
    assert status == 405 and json.loads(raw)["errors"][0]["status"] == 405
    status, raw = request(f"{gunicorn}/scheduler/nova/external", {"hosts": 1})
    assert status == 400 and "Traceback" not in raw.decode()


@pytest.mark.parametrize("warm", [True, False])
def test_workers_warm_up_before_they_serve(engine, database_url, tmp_path, warm):
    port = free_port()
    process, log = start_gunicorn(port, database_url, tmp_path,
                                  CORTEX_API_WARM_UP=str(warm).lower())
    status, _ = request(f"http://127.0.0.1:{port}/scheduler/nova/external",
                        load_body(bodies("nova")[0]))
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=20) == 0 and status == 200
    text = log.read_text()
    assert len(re.findall(r"warm-up: \d+ hosts, ", text)) == (2 if warm else 0), text
    assert "Traceback" not in text, text
