"""End to end: a gunicorn worker started on a busy machine serves within seconds.

gunicorn with the shipped settings (2 workers) on a database of its own holding the
demo fleet and :data:`SHAPES` stored request shapes, with ``[api] warm_up_shapes`` at
its maximum, so a fresh worker has more to warm than its time budget allows. The
machine is kept busy: :data:`HOGS_PER_CORE` CPU-bound processes per core and
:data:`CLIENTS` threads posting Nova calls back to back. One worker is killed with
SIGKILL; gunicorn forks a replacement at once, and its first answered call (its pid
in Cortex's log line of the call) must come within :data:`BOUND` seconds of the kill.
"""

from __future__ import annotations

import copy
import http.client
import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from cortex.store.shapes import ShapeStore
from tests.conftest import FIXTURES, demo_database, load_body
from tests.functional.test_gunicorn import free_port, start_gunicorn
from tests.waiting import eventually, wait_until

pytestmark = pytest.mark.functional

#: Request shapes stored for the warm-up to replay ([api] warm_up_shapes' maximum).
SHAPES = 200
#: CPU-bound processes per core while the worker is replaced.
HOGS_PER_CORE = 8
#: Threads posting Nova calls back to back.
CLIENTS = 8
#: Seconds from the kill to the replacement's first answered call: the operator's
#: 10 s and some room for a slow machine.
BOUND = 15.0
BODIES = ("cpu-general-purpose.json", "gpu-1xa100-numa.json", "gpu-2xh100-pinned.json")


def store_shapes(engine) -> None:
    """:data:`SHAPES` request shapes of the bundled Nova bodies, their flavors varied."""
    store = ShapeStore(engine)
    bodies = [load_body(FIXTURES / "nova" / name) for name in BODIES]
    for i in range(SHAPES):
        body = copy.deepcopy(bodies[i % len(bodies)])
        flavor = body["spec"]["nova_object.data"]["flavor"]["nova_object.data"]
        flavor["vcpus"] += i // len(bodies)
        flavor["memory_mb"] += 1024 * (i // len(bodies))
        store.save(f"replacement-{i:03d}", "nova", body)


class Clients:
    """:data:`CLIENTS` threads posting the bundled Nova bodies until :meth:`stop`;
    ``answered`` counts the 200s. Failures (the killed worker's connections) are
    expected and only counted."""

    def __init__(self, base: str) -> None:
        self.url = f"{base}/scheduler/nova/external"
        self.payloads = [json.dumps(load_body(FIXTURES / "nova" / name)).encode()
                         for name in BODIES]
        self.answered = self.failed = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True)
                         for i in range(CLIENTS)]
        for thread in self._threads:
            thread.start()

    def _run(self, i: int) -> None:
        while not self._stop.is_set():
            request = urllib.request.Request(
                self.url, data=self.payloads[i % len(self.payloads)],
                headers={"Content-Type": "application/json"})
            i += 1
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    response.read()
                    self.answered += response.status == 200
            except (OSError, http.client.HTTPException):  # HTTPError is an OSError
                self.failed += 1

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)


class Log:
    """gunicorn's log from the moment this object is made, read on as it grows."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = path.stat().st_size
        self.text = ""

    def read(self) -> str:
        """Everything written since this object was made."""
        with self.path.open("rb") as file:
            file.seek(self._offset)
            more = file.read()
        self._offset += len(more)
        self.text += more.decode(errors="replace")
        return self.text


def worker_pids(log_text: str) -> list[int]:
    """Pids of the workers gunicorn booted, in order."""
    return [int(pid) for pid in re.findall(r"Booting worker with pid: (\d+)", log_text)]


def test_a_worker_started_under_load_serves_within_seconds(tmp_path):
    with demo_database("replacement") as (url, engine):
        store_shapes(engine)
        port = free_port()
        process, log_path = start_gunicorn(port, url, tmp_path,
                                           CORTEX_API_WARM_UP_SHAPES=str(SHAPES))
        hogs: list[subprocess.Popen] = []
        clients = None
        try:
            workers = worker_pids(log_path.read_text())
            assert len(workers) == 2, log_path.read_text()
            clients = Clients(f"http://127.0.0.1:{port}")
            wait_until(lambda: clients.answered >= 20, what="20 answered calls")
            hogs = [subprocess.Popen(["sh", "-c", "while :; do :; done"])
                    for _ in range(HOGS_PER_CORE * (os.cpu_count() or 1))]
            log = Log(log_path)
            os.kill(workers[0], signal.SIGKILL)
            killed = time.monotonic()
            replacement = wait_until(lambda: worker_pids(log.read()), timeout=BOUND,
                                     what="a replacement worker")[0]
            served = re.compile(rf"^\S+ \S+ {replacement} INFO cortex\.scheduler\.service "
                                r".*nova external: status=200", re.MULTILINE)
            # waits past the bound, to say how long it did take
            eventually(lambda: served.search(log.read()), timeout=3 * BOUND)
            took = time.monotonic() - killed
            print(f"replacement {replacement}: first answer {took:.1f} s after the kill")
            assert served.search(log.text), f"replacement {replacement} answered nothing " \
                                            f"in {took:.1f} s"
            assert took <= BOUND, f"replacement {replacement} answered first after " \
                                  f"{took:.1f} s (bound {BOUND:g} s)"
        finally:
            for hog in hogs:
                hog.kill()
            for hog in hogs:
                hog.wait()
            if clients is not None:
                clients.stop()
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
        assert "Traceback" not in log_path.read_text()

