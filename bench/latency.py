"""End-to-end latency through gunicorn on loopback, against an HTTP floor.

Run: .venv/bin/python bench/latency.py [--sizes 10,100,1000,5000] [--requests 300]
     [--workers 1,2] [--inflight N] [--set scheduler_reservation_feed=false]

For each size N it builds a fleet of N KVM hosts (a tenth of them HGX GPU hosts),
loads it into a fresh database (PostgreSQL at $CORTEX_BENCH_DATABASE_URL or
127.0.0.1:5432, else SQLite), and posts a Nova body naming all N hosts: the general-
purpose one and the 2x H100 GPU one (so both shipped pipelines run). It reports p50
and p99 of sequential calls and requests/s with 8 concurrent clients (each part
starting with no decision record left to write, the throughput counting the time to
write the part's own), for Cortex
and for the floor (bench/floor_app.py: parse, sort by weight, answer) under the
same gunicorn settings, with 1 and 2 workers, and the ratio to the floor. Client
and server share this machine's cores: absolute numbers are pessimistic. Then, for
each of ``--memory-sizes`` (default 10,000 hosts), the resident memory of a worker
process: the app alone, with the knowledge view loaded, and after both bodies.
"""

from __future__ import annotations

import argparse
import atexit
import copy
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import insert, text

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cortex.db import migrate, models  # noqa: E402
from cortex.db.engine import make_engine  # noqa: E402
from cortex.knowledge.loader import load_view  # noqa: E402
from cortex.store.fleet import import_fleet  # noqa: E402

BODIES = {"general": "nova/cpu-general-purpose.json", "gpu": "nova/gpu-2xh100-pinned.json"}


def fleet(n: int) -> dict:
    """N hosts cmp00000…: every tenth an HGX (PCPU) host, the rest general purpose."""
    hosts = []
    for i in range(n):
        gpu = i % 10 == 0
        cpu = {"PCPU": {"total": 200, "used": (i * 8) % 160}} if gpu else {
            "VCPU": {"total": 256, "allocation_ratio": 4.0, "used": (i * 37) % 900}}
        hosts.append({"host": f"cmp{i:05d}", "node": f"cmp{i:05d}.cloud.example",
                      "uuid": f"00000000-0000-4000-8000-{i:012d}", "availability_zone": "az-1",
                      "hypervisor_type": "QEMU", "traits": [],
                      "inventories": cpu | {
                          "MEMORY_MB": {"total": 2_097_152, "used": (i * 65536) % 1_500_000},
                          "DISK_GB": {"total": 3576, "used": (i * 97) % 3000}}})
    return {"hosts": hosts}


def body(kind: str, n: int) -> bytes:
    """The bundled body with its hosts replaced by the N fleet hosts."""
    data = json.loads((REPO / "tests/fixtures" / BODIES[kind]).read_text())
    data = copy.deepcopy(data)
    names = [f"cmp{i:05d}" for i in range(n)]
    data["hosts"] = [{"host": h, "hypervisor_hostname": f"{h}.cloud.example"} for h in names]
    data["weights"] = {h: ((i * 7919) % 1000) / 100 - 5 for i, h in enumerate(names)}
    return json.dumps(data).encode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(app: str, workers: int, env: dict) -> tuple[subprocess.Popen, int]:
    """gunicorn with the shipped settings; returns once /healthcheck answers."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", str(REPO / "etc/cortex/gunicorn.conf.py"),
         "--bind", f"127.0.0.1:{port}", "--workers", str(workers), "--access-logfile",
         "/dev/null", "--log-level", "warning", app],
        env=os.environ | env | {"PYTHONPATH": str(REPO / "bench")},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/healthcheck")
            if connection.getresponse().status == 200:
                return process, port
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"{app} did not start")


def call(connection: http.client.HTTPConnection, payload: bytes) -> float:
    """One POST on a kept-alive connection; seconds it took."""
    started = time.perf_counter()
    connection.request("POST", "/scheduler/nova/external", body=payload,
                       headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    response.read()
    if response.status != 200:
        raise RuntimeError(f"status {response.status}")
    return time.perf_counter() - started


def queued_decisions(port: int) -> float:
    """Decision records the server still has to write (its ``/metrics``); 0 for the floor."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.request("GET", "/metrics")
    response = connection.getresponse()
    text = response.read().decode()
    if response.status != 200:
        return 0.0
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("cortex_decision_queue_depth"))


def drain(port: int, limit: float = 300.0) -> float:
    """Wait until the server has written every queued decision record; seconds waited."""
    started = time.perf_counter()
    while queued_decisions(port) > 0 and time.perf_counter() - started < limit:
        time.sleep(0.05)
    return time.perf_counter() - started


def measure(port: int, payload: bytes, requests: int) -> tuple[float, float, float]:
    """(p50 ms, p99 ms) of sequential calls, then requests/s with 8 concurrent clients.

    Each part starts once the decision records of the calls before it are written
    (the writer shares the worker's interpreter), and the throughput counts the time
    the writer then needs to catch up: what the server sustains, not a burst that
    leaves a backlog.
    """
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for _ in range(10):
        call(connection, payload)
    drain(port)
    samples = sorted(call(connection, payload) for _ in range(requests))
    p50, p99 = statistics.median(samples) * 1000, samples[int(len(samples) * 0.99)] * 1000
    done = [0]

    def client():
        own = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        stop = time.perf_counter() + 3.0
        while time.perf_counter() < stop:
            call(own, payload)
            done[0] += 1

    drain(port)
    threads = [threading.Thread(target=client) for _ in range(8)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    drain(port)
    return p50, p99, done[0] / (time.perf_counter() - started)


def _drop(admin, name: str) -> None:
    """Drop this run's database at exit, whoever still holds a connection to it."""
    with admin.connect() as c:
        c.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


def database(n: int, tmp: str, inflight: int = 0) -> str:
    """A fresh database holding the N-host fleet and ``inflight`` reservations; its URL.

    The reservations are other instances' (1 VCPU, 512 MiB each), spread over the
    fleet and unexpired for the whole run, as a busy cloud has one for every create of
    the last ``reservation_ttl`` seconds.
    """
    server = os.environ.get("CORTEX_BENCH_DATABASE_URL",
                            "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    try:
        admin = make_engine(server, isolation_level="AUTOCOMMIT")
        name = f"cortex_bench_{os.getpid()}_{n}"  # unique per run: two runs never collide
        with admin.connect() as c:
            c.execute(text(f"CREATE DATABASE {name}"))
        atexit.register(_drop, admin, name)
        url = server.rsplit("/", 1)[0] + f"/{name}"
    except Exception:  # noqa: BLE001 - no PostgreSQL: the embedded default
        url = f"sqlite:///{tmp}/bench-{n}.sqlite"
    engine = make_engine(url)
    migrate.upgrade(engine)
    with engine.begin() as connection:
        import_fleet(connection, fleet(n))
        if inflight:
            now = datetime.now(UTC)
            connection.execute(insert(models.InflightReservation), [{
                "id": f"00000000-0000-4000-a000-{i:012d}", "host": f"cmp{(i * 7) % n:05d}",
                "instance_uuid": f"00000000-0000-4000-b000-{i:012d}", "group_id": None,
                "resources": {"VCPU": 1, "MEMORY_MB": 512}, "gpus": [], "created_at": now,
                "expires_at": now + timedelta(hours=6)} for i in range(inflight)])
    engine.dispose()
    return url


def view_memory(n: int, url: str) -> float:
    """MiB that one knowledge view of N hosts takes (tracemalloc)."""
    engine = make_engine(url)
    tracemalloc.start()
    view = load_view(engine)
    size = tracemalloc.get_traced_memory()[0] / 2**20
    tracemalloc.stop()
    del view
    return size


# Run in a fresh interpreter: what one gunicorn worker holds, in MiB of resident memory.
_WORKER_MEMORY = """
import json, sys
from cortex import conf
from cortex.api.app import create_app
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
import cortex.scheduler.service, cortex.plugins.registry
cortex.plugins.registry.load_all()
started = rss()
app = create_app(conf.load(environ={}, overrides={"database.connection": sys.argv[1],
                                                  "api.auth_strategy": "noauth"}))
app.extensions["cortex"].knowledge.view()
viewed = rss()
client = app.test_client()
for body in sys.argv[2:]:
    assert client.post("/scheduler/nova/external", data=open(body, "rb").read(),
                       content_type="application/json").status_code == 200
app.extensions["cortex"].decisions.close()
print(json.dumps([started, viewed, rss()]))
"""


def worker_memory(n: int, url: str, tmp: str) -> tuple[float, float, float]:
    """Resident MiB of a worker process: code imported, app built with the view of N hosts
    loaded, after requests.

    The requests (both bodies, naming all N hosts) fill the facts the plugins keep
    in the view. Linux only (``/proc/self/status``).
    """
    paths = []
    for kind in BODIES:
        path = Path(tmp) / f"{kind}-{n}.json"
        path.write_bytes(body(kind, n))
        paths.append(str(path))
    out = subprocess.run([sys.executable, "-c", _WORKER_MEMORY, url, *paths],
                         capture_output=True, text=True, check=True, cwd=REPO,
                         env=os.environ | {"PYTHONPATH": str(REPO)})
    return tuple(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="10,100,1000,5000")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--memory-sizes", default="10000",
                        help="fleet sizes to measure a worker's resident memory at")
    parser.add_argument("--inflight", type=int, default=0,
                        help="other instances' unexpired reservations in the table")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION_OPTION=VALUE",
                        help="Cortex configuration for the run, e.g. "
                             "scheduler_reservation_feed=false (repeatable)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    print(f"{'hosts':>6} {'body':8} {'wk':>2} {'p50 ms':>8} {'p99 ms':>8} {'req/s':>8} "
          f"{'floor p50':>9} {'floor p99':>9} {'floor r/s':>9} {'p50 ratio':>9} {'r/s ratio':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            url = database(n, tmp, args.inflight)
            env = {"CORTEX_DATABASE_CONNECTION": url, "CORTEX_API_AUTH_STRATEGY": "noauth",
                   "CORTEX_SCHEDULER_DECISION_QUEUE_SIZE": "100000"} | {
                f"CORTEX_{key.upper()}": value
                for key, value in (item.split("=", 1) for item in args.set)}
            for workers in (int(w) for w in args.workers.split(",")):
                servers = {"cortex": serve("cortex.wsgi:application", workers, env),
                           "floor": serve("floor_app:application", workers, {})}
                try:
                    for kind in BODIES:
                        payload = body(kind, n)
                        ours = measure(servers["cortex"][1], payload, args.requests)
                        floor = measure(servers["floor"][1], payload, args.requests)
                        print(f"{n:6d} {kind:8} {workers:2d} {ours[0]:8.2f} {ours[1]:8.2f} "
                              f"{ours[2]:8.0f} {floor[0]:9.2f} {floor[1]:9.2f} {floor[2]:9.0f} "
                              f"{ours[0] / floor[0]:9.2f} {ours[2] / floor[2]:9.2f}", flush=True)
                finally:
                    for process, _ in servers.values():
                        process.terminate()
                        process.wait(timeout=30)
            print(f"{n:6d} knowledge view: {view_memory(n, url):.1f} MiB per worker", flush=True)
        for n in (int(s) for s in args.memory_sizes.split(",") if s):
            url = database(n, tmp)
            started, viewed, used = worker_memory(n, url, tmp)
            print(f"{n:6d} hosts: worker RSS {started:.0f} MiB imported, {viewed:.0f} MiB "
                  f"with the app and view ({view_memory(n, url):.1f} MiB traced), "
                  f"{used:.0f} MiB after both bodies", flush=True)


if __name__ == "__main__":
    main()
