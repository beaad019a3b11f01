"""The test side of the Nova loop: the driver process, a real Cortex, cortex-sync's reads.

- :class:`NovaProcess` starts ``nova_driver.py`` in the Nova functional virtualenv and
  sends it commands (``/control/<command>``, JSON).
- :class:`CortexServer` is Cortex as production runs it: gunicorn on ``cortex.wsgi``
  with one worker, on a loopback port, over a PostgreSQL database of its own.
- :func:`clouds_yaml` points openstacksdk (and so cortex-sync) at that Nova and
  Placement: ``auth_type: none`` with endpoint overrides, as for a cloud without
  Keystone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from tests.conftest import REPO
from tests.nova_loop import fleet
from tests.real_servers import free_port

HERE = Path(__file__).resolve().parent
CLOUD = "nova-loop"


class LoopError(AssertionError):
    """A command of the driver failed; the message carries Nova's traceback."""


def http(method: str, url: str, body=None, headers=None, timeout: float = 60):
    """``(status, decoded JSON or text)`` of one request (no exception for HTTP errors)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={
        "Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode(errors="replace")


class NovaProcess:
    """Nova's control plane in the driver process; :meth:`call` runs one command."""

    def __init__(self, python: Path, workdir: Path, cortex_url: str) -> None:
        self.workdir = workdir
        self.log = workdir / "nova.log"
        config = workdir / "nova-loop.json"
        config.write_text(json.dumps({"cortex_url": f"{cortex_url}/scheduler/nova/external",
                                      "log": str(self.log), "timeout": 10}))
        self.output = workdir / "driver.out"
        self._stderr = self.output.open("w")
        started = time.monotonic()
        self.process = subprocess.Popen(
            [str(python), str(HERE / "nova_driver.py"), str(config)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            text=True, cwd=workdir, env={"PATH": os.environ.get("PATH", ""),
                                         "HOME": os.environ.get("HOME", str(workdir))})
        line = self.process.stdout.readline()
        if not line.startswith("READY "):
            self.process.kill()
            self.process.wait()
            self._close()
            raise LoopError(f"the Nova driver did not start: {line}\n"
                            f"{self.output.read_text()[-4000:]}")
        self.urls = json.loads(line[len("READY "):])
        self.started_in = time.monotonic() - started

    def call(self, command: str, **args):
        """The result of ``command``; LoopError with Nova's traceback when it failed."""
        status, body = http("POST", f"{self.urls['control']}/{command}", args, timeout=300)
        if status != 200:
            detail = body.get("traceback") if isinstance(body, dict) else body
            recent = []
            if command != "hook_calls":
                calls = self.call("hook_calls", since=0)["calls"][-3:]
                recent = [{k: c.get(k) for k in ("instance_uuid", "check_type", "offered",
                                                  "answer", "fallback", "decision_id")}
                          for c in calls]
            raise LoopError(f"{command} failed: {detail}\nlast hook calls: {recent}")
        return body

    def placement(self, path: str):
        """``GET`` on the harness's Placement (as cortex-sync reads it)."""
        status, body = http("GET", f"{self.urls['placement']}{path}",
                            headers={"OpenStack-API-Version": "placement 1.39"})
        assert status == 200, (path, body)
        return body

    def stop(self) -> None:
        """Ask the driver to stop; kill it after 30 s."""
        try:
            http("POST", f"{self.urls['control']}/stop", {}, timeout=10)
        except OSError:
            pass
        try:
            self.process.stdin.close()
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._close()

    def _close(self) -> None:
        self.process.stdout.close()
        if not self.process.stdin.closed:
            self.process.stdin.close()
        self._stderr.close()


class CortexServer:
    """gunicorn on ``cortex.wsgi`` (one worker) over ``database_url``; ``url``."""

    def __init__(self, database_url: str, workdir: Path, **environ: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / "cortex.log"
        env = os.environ | {
            "CORTEX_DATABASE_CONNECTION": database_url, "CORTEX_WORKERS": "1",
            "CORTEX_API_AUTH_STRATEGY": "noauth", "PYTHONUNBUFFERED": "1",
            "CORTEX_DATABASE_KNOWLEDGE_CHECK_INTERVAL": "0.1",
            "CORTEX_GPU_PCI_ALIAS": json.dumps(list(fleet.ALIASES)),
            "PROMETHEUS_MULTIPROC_DIR": str(workdir / "metrics")} | environ
        env.pop("CORTEX_CONFIG_FILE", None)
        (workdir / "metrics").mkdir(exist_ok=True)
        self._output = self.log.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", str(REPO / "etc/cortex/gunicorn.conf.py"),
             "--bind", f"127.0.0.1:{self.port}", "cortex.wsgi:application"],
            env=env, stdout=self._output, stderr=subprocess.STDOUT, cwd=workdir)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if http("GET", f"{self.url}/healthcheck", timeout=2)[0] in (200, 503):
                    return
            except OSError:
                time.sleep(0.2)
        self.process.kill()
        self.process.wait()
        self._output.close()
        raise LoopError(f"Cortex did not start: {self.log.read_text()[-4000:]}")

    def get(self, path: str):
        status, body = http("GET", f"{self.url}{path}")
        assert status == 200, (path, status, body)
        return body

    def knowledge_version(self) -> int | None:
        status, body = http("GET", f"{self.url}/healthcheck?detail=1")
        return body.get("knowledge_version") if status == 200 else None

    def wait_for_version(self, version: int, seconds: float = 20) -> None:
        """Until the worker answers from knowledge ``version`` (or later)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            current = self.knowledge_version()
            if current is not None and current >= version:
                return
            time.sleep(0.05)
        raise LoopError(f"Cortex still answers from version {self.knowledge_version()}, "
                        f"not {version}")

    def report(self, host: str, report: dict) -> None:
        """Post ``host``'s topology as cortex-agent does."""
        status, body = http("POST", f"{self.url}/v1/topology/{host}", report)
        assert status == 200, (host, status, body)

    def decision(self, decision_id: str, seconds: float = 10) -> dict:
        """One decision record, once the writer stored it."""
        deadline = time.monotonic() + seconds
        while True:
            status, body = http("GET", f"{self.url}/v1/decisions/{decision_id}")
            if status == 200 or time.monotonic() > deadline:
                assert status == 200, (decision_id, status, body)
                return body
            time.sleep(0.05)

    def reservations(self) -> list[dict]:
        return self.get("/v1/reservations")["reservations"]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._output.close()


def clouds_yaml(path: Path, nova: NovaProcess) -> Path:
    """A clouds.yaml naming the harness's Nova and Placement as cloud :data:`CLOUD`."""
    path.write_text(yaml.safe_dump({"clouds": {CLOUD: {
        "auth_type": "none",
        "compute_endpoint_override": nova.urls["compute"],
        "placement_endpoint_override": nova.urls["placement"],
    }}}))
    return path
