"""End to end: gunicorn on a free loopback port serving every bundled body."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

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


@pytest.fixture
def gunicorn(engine, database_url, tmp_path):
    """gunicorn with 2 workers on the session's database (demo fleet loaded)."""
    port = free_port()
    env = os.environ | {"CORTEX_DATABASE_CONNECTION": database_url,
                        "CORTEX_WORKERS": "2", "PYTHONUNBUFFERED": "1"}
    env.pop("CORTEX_CONFIG_FILE", None)
    log = (tmp_path / "gunicorn.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", str(REPO / "etc/cortex/gunicorn.conf.py"),
         "--bind", f"127.0.0.1:{port}", "cortex.wsgi:application"],
        env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if request(f"{base}/healthcheck")[0] == 200:
                break
        except OSError:
            time.sleep(0.2)
    else:
        process.kill()
        pytest.fail(Path(log.name).read_text())
    yield base
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=20) == 0
    log.close()
    text = Path(log.name).read_text()
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


def test_gunicorn_contract_errors(gunicorn):
    status, raw = request(f"{gunicorn}/scheduler/nova/external", method="GET")
    assert status == 405 and json.loads(raw)["errors"][0]["status"] == 405
    status, raw = request(f"{gunicorn}/scheduler/nova/external", {"hosts": 1})
    assert status == 400 and "Traceback" not in raw.decode()
