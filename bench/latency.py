"""End-to-end latency through gunicorn on loopback, against the HTTP floor.

Run: .venv/bin/python bench/latency.py [--fleet gpu|kvm] [--sizes 100,1000]
     [--workers 1,2] [--bodies 2gpu-required,...] [--requests 300] [--inflight N]
     [--first-sizes 1000] [--first-workers 5] [--memory-sizes 10000]
     [--set scheduler_step_memo_size=0]
     [--scrape-every 15]

``--fleet gpu`` (the default): a seeded fleet of N GPU hosts of six kinds with drawn
occupancy (``bench/gpu_fleet.py``: HGX H100, A100 with NVLink bridges, L40S, MIG, vGPU)
and Nova bodies for 1, 2, 4 and 8 GPUs under each PCI NUMA policy and one vGPU, all
through ``kvm-gpu-topology-aware``. ``--fleet kvm``: N KVM hosts, a tenth of them PCPU
hosts, with the bundled general-purpose body through
``kvm-general-purpose-load-balancing``.
Each fleet is loaded into a database of its own (PostgreSQL at
$CORTEX_BENCH_DATABASE_URL or 127.0.0.1:5432, else SQLite), dropped at exit.

For each size and worker count it serves Cortex and the floor (bench/floor_app.py: parse
with orjson, sort by weight, answer) with the shipped gunicorn settings and posts each
body naming all N hosts as real traffic (:class:`Traffic`): every call a new instance,
every tenth a move of an instance already running, a live migration and a cold
migration in turn (its create's reservation expired, its row still there, so the
promise rewrites that row). p50 and p99 of sequential calls, Cortex's and the two
floors' taken in turn (:func:`measure`), then requests/s with 8 concurrent clients for
3 s each (each part starting with no decision record left to write, the throughput
counting the time to write the part's own), the ratios to the floor, the p50 and
requests/s of the promised floor (the floor that also promises its first host with
Cortex's one-statement promise, in a database of its own: what any scheduler keeping
its promises in PostgreSQL pays), the size of Cortex's answer (hosts and bytes,
median), and Cortex's calls of the body (``calls``, of them ``moves``) and promises:
``made`` (rows written, read from the database), ``refused`` (hosts a promise found
changed and dropped) and ``skipped`` (answers sent unpromised: the store failed), both
from ``/metrics``. An answer of ``[]`` means the steps meant to be measured did not run,
and stops the run.
``--scrape-every S``: while Cortex's calls are timed, a Prometheus-like client
scrapes its ``/metrics`` every S seconds (0: never); the row then says how many scrapes
ran and their mean time.

``--first-sizes``: a one-worker gunicorn serves the first body once and stops (the
worker before a restart or a deploy, which stores its request shape); then on each of
``--first-workers`` freshly started ones (warmed before it serves, as shipped, with the
stored shapes), the first call of that body, on the first of them a second body's first
call (a request shape never seen), the p50 of the following calls, and the median of
five calls each made after 0.5 s idle, medians over the workers (a
first call comes after idling too, and this machine runs the same work 2-4x slower
then). ``--memory-sizes``: the
time to load the knowledge view in a fresh process and the resident memory of a
worker: code imported, app and view loaded, after the bodies.

Client and servers share this machine's cores: absolute numbers are pessimistic;
compare the columns of one run.
"""

from __future__ import annotations

import argparse
import atexit
import copy
import http.client
import itertools
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
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import func, insert, select, text

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import gpu_fleet  # noqa: E402

from cortex.db import migrate, models  # noqa: E402
from cortex.db.engine import make_engine  # noqa: E402
from cortex.knowledge.loader import load_view  # noqa: E402
from cortex.store.fleet import import_fleet  # noqa: E402

#: The KVM fleet's body (its GPU hosts lack what the bundled 2x H100 body asks: it would
#: answer [], so the GPU fleet measures GPU requests).
KVM_BODIES = {"general": "nova/cpu-general-purpose.json"}


def kvm_fleet(n: int) -> dict:
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


def kvm_bodies(n: int) -> dict[str, bytes]:
    """The bundled bodies with their hosts replaced by the N KVM fleet hosts."""
    names = [f"cmp{i:05d}" for i in range(n)]
    found = {}
    for kind, path in KVM_BODIES.items():
        data = copy.deepcopy(json.loads((REPO / "tests/fixtures" / path).read_text()))
        data["hosts"] = [{"host": h, "hypervisor_hostname": f"{h}.cloud.example"} for h in names]
        data["weights"] = {h: ((i * 7919) % 1000) / 100 - 5 for i, h in enumerate(names)}
        found[kind] = json.dumps(data).encode()
    return found


class Workload:
    """A fleet kind: its fleet document and its bodies (name -> JSON) for N hosts."""

    def __init__(self, kind: str, seed: int, only: list[str]) -> None:
        self.kind, self.seed, self.only = kind, seed, only

    def fleet(self, n: int) -> dict:
        if self.kind == "kvm":
            return kvm_fleet(n)
        return gpu_fleet.gpu_fleet(n, self.seed)

    def bodies(self, n: int) -> dict[str, bytes]:
        if self.kind == "kvm":
            found = kvm_bodies(n)
        else:
            found = {name: json.dumps(body).encode()
                     for name, body in gpu_fleet.bodies(gpu_fleet.names(n)).items()}
        return {k: v for k, v in found.items() if not self.only or k in self.only}

    def host(self, i: int, n: int) -> str:
        return f"cmp{i:05d}" if self.kind == "kvm" else gpu_fleet.names(n)[i]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(app: str, workers: int, env: dict) -> tuple[subprocess.Popen, int]:
    """gunicorn with the shipped settings; returns once /healthcheck answers.

    A floor (not ``cortex.``) is served without Cortex's worker hooks
    (bench/floor_gunicorn.conf.py).
    """
    port = free_port()
    config = ("etc/cortex/gunicorn.conf.py" if app.startswith("cortex.")
              else "bench/floor_gunicorn.conf.py")
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", str(REPO / config),
         "--bind", f"127.0.0.1:{port}", "--workers", str(workers), "--access-logfile",
         "/dev/null", "--log-level", "warning", app],
        env=os.environ | env | {"PYTHONPATH": str(REPO / "bench")},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/healthcheck")
            if connection.getresponse().status == 200:
                return process, port
        except OSError:
            pass
        time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"{app} did not start")


#: Seconds a promise of the benchmark lives (``[scheduler] reservation_ttl``, and the
#: promised floor's). The fleet's usage stays as loaded, so a promise's end stands for
#: an instance that left again; 100 hosts have free GPUs for ~130 2-GPU instances, and
#: the concurrent part makes up to ~400 creates a second: a longer life fills the fleet
#: and answers ``[]``. A cloud's many live promises are ``--inflight``.
PROMISE_SECONDS = 0.5
#: Every MOVE_EVERY-th call of :class:`Traffic` is a move: a live migration and a cold
#: migration (a resize to the same flavor) in turn.
MOVE_EVERY = 10
#: Instances running before the run, each with its create's reservation expired but not
#: pruned: the instances the moves move (``database``), one after another.
RUNNING = 20_000
_RUNNING_UUID = "00000000-0000-4000-c000-{:012d}"
_MOVED = itertools.count()


def moved(body: dict, intent: str) -> dict:
    """``body`` as Nova sends it to move its instance: ``live_migrate`` (``live: true``)
    or ``resize`` (``resize: true``, a cold migration when the flavor stays), the intent
    in the ``_nova_check_type`` hint as Nova's conductor writes it (the bundled
    ``cpu-live-migrate.json`` and ``cpu-resize.json``)."""
    body = copy.deepcopy(body)
    data = body["spec"]["nova_object.data"]
    data["scheduler_hints"] = dict(data.get("scheduler_hints") or {},
                                   _nova_check_type=[intent])
    body["live"], body["resize"] = intent == "live_migrate", intent == "resize"
    return body


class Traffic:
    """Nova calls of one body as a cloud sends them: every call a new instance (a create,
    whose promise inserts a row), every :data:`MOVE_EVERY`-th a move of one of the
    :data:`RUNNING` instances, a live migration and a cold migration in turn
    (:func:`moved`), whose promise rewrites that instance's row. ``next()`` is safe from
    several threads; ``moves`` counts the moves handed out.
    """

    def __init__(self, payload: bytes) -> None:
        body = json.loads(payload)
        self.own = body["spec"]["nova_object.data"]["instance_uuid"].encode()
        self.create = payload
        self.moving = [json.dumps(moved(body, intent)).encode()
                       for intent in ("live_migrate", "resize")]
        self._calls = itertools.count(1)
        self.moves = 0

    def next(self) -> bytes:
        """The next call's body (a new bytes object; the uuid swap costs ~20 us at 1,000
        hosts, outside the timed part of sequential calls)."""
        call = next(self._calls)
        if call % MOVE_EVERY:
            return self.create.replace(self.own, str(uuid.uuid4()).encode())
        self.moves += 1
        running = next(_MOVED) % RUNNING  # across bodies and servers: each moved once
        move = self.moving[(call // MOVE_EVERY) % len(self.moving)]
        return move.replace(self.own, _RUNNING_UUID.format(running).encode())


def call(connection: http.client.HTTPConnection, payload: bytes) -> tuple[float, int, int]:
    """One POST on a kept-alive connection; (seconds it took, hosts answered, answer bytes)."""
    started = time.perf_counter()
    connection.request("POST", "/scheduler/nova/external", body=payload,
                       headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    data = response.read()
    elapsed = time.perf_counter() - started
    if response.status != 200:
        raise RuntimeError(f"status {response.status}: {data[:200]!r}")
    return elapsed, len(json.loads(data)["hosts"]), len(data)


def answered(connection: http.client.HTTPConnection, payload: bytes) -> float:
    """Seconds one call took; stops the run when it answered no host (nothing was timed)."""
    elapsed, hosts, _ = call(connection, payload)
    if not hosts:
        raise SystemExit("a body answered []: the steps meant to be timed did not run")
    return elapsed


def metric_sum(port: int, prefix: str, needle: str = "") -> float:
    """The sum of the server's ``/metrics`` samples named ``prefix`` (whose line holds
    ``needle``); 0 for the floors."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.request("GET", "/metrics")
    response = connection.getresponse()
    lines = response.read().decode().splitlines()
    if response.status != 200:
        return 0.0
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines
               if line.startswith(prefix) and needle in line)


def promise_counts(port: int) -> tuple[float, float]:
    """(hosts refused by a promise, answers sent unpromised) so far, over every worker."""
    return (metric_sum(port, "cortex_pipeline_hosts_removed_total",
                       'step="inflight_reservations"'),
            metric_sum(port, "cortex_scheduler_unpromised_answers_total"))


def made_since(url: str, since: datetime) -> int:
    """Reservations written at or after ``since`` in the database at ``url``."""
    engine = make_engine(url)
    with engine.connect() as connection:
        made = connection.execute(select(func.count()).select_from(
            models.InflightReservation).where(
            models.InflightReservation.created_at >= since)).scalar()
    engine.dispose()
    return int(made or 0)


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


class Scraper:
    """Scrapes ``/metrics`` on ``port`` every ``every`` seconds while in its ``with`` block.

    ``every`` 0: never. ``durations``: seconds each scrape took.
    """

    def __init__(self, port: int, every: float) -> None:
        self.port, self.every = port, every
        self.durations: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        while not self._stop.wait(self.every):
            started = time.perf_counter()
            connection.request("GET", "/metrics")
            connection.getresponse().read()
            self.durations.append(time.perf_counter() - started)

    def __enter__(self) -> Scraper:
        if self.every > 0:
            self._thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


class Target:
    """One server of a row: its ``name``, ``port``, :class:`Traffic`, and ``url`` (its
    database, Cortex's only: its promises are counted there). :func:`measure` fills
    the rest."""

    def __init__(self, name: str, port: int, traffic: Traffic, url: str | None = None
                 ) -> None:
        self.name, self.port, self.traffic, self.url = name, port, traffic, url
        self.answers: list[tuple[int, int]] = []  # (hosts, bytes) of each sequential call
        self.samples: list[float] = []  # seconds of each timed sequential call
        self.rate, self.loaded, self.failed = 0.0, 0, 0  # the concurrent part
        self.warm_failed = 0  # warm-up calls answered 503 (the time budget ran out)
        self.scrapes: list[float] = []
        self.promises: tuple[int, int, float, float] = (0, 0, 0.0, 0.0)

    def result(self) -> tuple[float, float, float, int, int]:
        """(p50 ms, p99 ms, requests/s, hosts answered, answer bytes), medians."""
        samples = sorted(self.samples)
        return (statistics.median(samples) * 1000, samples[int(len(samples) * 0.99)] * 1000,
                self.rate, statistics.median_low(h for h, _ in self.answers),
                statistics.median_low(b for _, b in self.answers))

    @property
    def empty(self) -> int:
        """Timed sequential calls answered ``[]`` (the fleet full of promises)."""
        return sum(1 for h, _ in self.answers[10:] if not h)


def measure(targets: list[Target], requests: int, scrape_every: float = 0.0) -> None:
    """Time every target on its own traffic of one body, interleaved; results on them.

    Ten warm-up calls each, then ``requests`` sequential calls per target taken in
    turn (call i goes to every target, the order rotated from one call to the next), so
    that whatever else the machine runs meanwhile weighs on all alike; then requests/s
    with 8 concurrent clients for 3 s, one target after another. Requests/s counts
    answered calls only; those that were not (a 503 when the time budget ran out under
    the load) are left in ``failed``. For a target with a ``url`` (Cortex),
    ``promises`` is (calls, made, refused, skipped) over every call of this measure,
    warm-up included, and its ``/metrics`` is scraped every ``scrape_every`` s (0:
    never) while its calls are timed. A warm-up call answered ``[]`` stops the run; one
    answered 503 (a shape's first call on a loaded machine may run out of its time
    budget) is counted in ``warm_failed`` and made again.

    Each part starts once the decision records of the calls before it are written
    (the writer shares the worker's interpreter), and the throughput counts the time
    the writer then needs to catch up: what the server sustains, not a burst that
    leaves a backlog.
    """
    connections, since, before = {}, {}, {}
    for target in targets:
        since[target.name] = datetime.now(UTC)
        before[target.name] = promise_counts(target.port) if target.url else (0.0, 0.0)
        connections[target.name] = http.client.HTTPConnection("127.0.0.1", target.port,
                                                              timeout=30)
        target.answers = []
        while len(target.answers) < 10:  # the first call of a shape may run out of time
            try:
                target.answers.append(call(connections[target.name],
                                           target.traffic.next())[1:])
            except RuntimeError:  # a 503: retried, at most 10 times
                target.warm_failed += 1
                if target.warm_failed > 10:
                    raise
        if not all(h for h, _ in target.answers):
            raise SystemExit("a warm-up call answered []: the steps meant to be timed "
                             "did not run")
    for target in targets:
        drain(target.port)
    payloads = {t.name: [t.traffic.next() for _ in range(requests)]  # before the clock
                for t in targets}
    scrapers = [Scraper(t.port, scrape_every if t.url else 0.0) for t in targets]
    for scraper in scrapers:
        scraper.__enter__()
    try:
        for i in range(requests):
            for k in range(len(targets)):
                target = targets[(i + k) % len(targets)]
                elapsed, hosts, size = call(connections[target.name],
                                            payloads[target.name][i])
                target.samples.append(elapsed)
                target.answers.append((hosts, size))
    finally:
        for scraper in scrapers:
            scraper.__exit__()
    for target, scraper in zip(targets, scrapers, strict=True):
        target.scrapes = scraper.durations
        _throughput(target, scrape_every if target.url else 0.0)
        if target.url:
            after = promise_counts(target.port)
            target.promises = (len(target.answers) + target.loaded + target.failed,
                               made_since(target.url, since[target.name]),
                               after[0] - before[target.name][0],
                               after[1] - before[target.name][1])


def _throughput(target: Target, scrape_every: float) -> None:
    """Requests/s of ``target`` with 8 concurrent clients for 3 s, into its ``rate``,
    ``loaded`` (calls answered) and ``failed``."""
    done, failed = [0], [0]

    def client():
        own = http.client.HTTPConnection("127.0.0.1", target.port, timeout=30)
        stop = time.perf_counter() + 3.0
        while time.perf_counter() < stop:
            try:
                call(own, target.traffic.next())
                done[0] += 1
            except RuntimeError:  # a 503 (the time budget ran out): counted, not answered
                failed[0] += 1

    drain(target.port)
    threads = [threading.Thread(target=client) for _ in range(8)]
    started = time.perf_counter()
    with Scraper(target.port, scrape_every) as loaded:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    drain(target.port)
    target.rate = done[0] / (time.perf_counter() - started)
    target.loaded, target.failed = done[0], failed[0]
    target.scrapes = target.scrapes + loaded.durations


#: Numbers the databases of this run.
_DATABASES = itertools.count()


def _drop(admin, name: str) -> None:
    """Drop this run's database at exit, whoever still holds a connection to it."""
    with admin.connect() as c:
        c.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


def new_database(tag: str, tmp: str) -> str:
    """A fresh migrated database of this run, dropped at exit; its URL.

    PostgreSQL at $CORTEX_BENCH_DATABASE_URL or 127.0.0.1:5432, else SQLite in ``tmp``.
    """
    server = (os.environ.get("CORTEX_BENCH_DATABASE_URL")
              or "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    # two runs never collide, nor two databases of one run with the same tag
    name = f"cortex_bench_{os.getpid()}_{next(_DATABASES)}_{tag}"
    try:
        admin = make_engine(server, isolation_level="AUTOCOMMIT")
        with admin.connect() as c:
            c.execute(text(f"CREATE DATABASE {name}"))
        atexit.register(_drop, admin, name)
        url = server.rsplit("/", 1)[0] + f"/{name}"
    except Exception as exc:  # noqa: BLE001 - no PostgreSQL: the embedded default
        print(f"no PostgreSQL at {server} ({type(exc).__name__}): SQLite instead",
              file=sys.stderr, flush=True)
        url = f"sqlite:///{tmp}/{name}.sqlite"
    engine = make_engine(url)
    migrate.upgrade(engine)
    engine.dispose()
    return url


def database(workload: Workload, n: int, tmp: str, inflight: int = 0) -> str:
    """A fresh database holding the N-host fleet, the :data:`RUNNING` instances' expired
    reservations, and ``inflight`` unexpired ones; its URL.

    The reservations are other instances' (1 VCPU, 512 MiB each), spread over the
    fleet and unexpired for the whole run, as a busy cloud has one for every create of
    the last ``reservation_ttl`` seconds.
    """
    url = new_database(f"{workload.kind}_{n}", tmp)
    engine = make_engine(url)
    with engine.begin() as connection:
        import_fleet(connection, workload.fleet(n))
        created = datetime.now(UTC) - timedelta(days=1)
        connection.execute(insert(models.InflightReservation), [{  # Traffic's moves
            "id": f"00000000-0000-4000-d000-{i:012d}", "host": workload.host(i % n, n),
            "instance_uuid": _RUNNING_UUID.format(i), "group_id": None,
            "resources": {"VCPU": 1, "MEMORY_MB": 512}, "gpus": [], "created_at": created,
            "expires_at": created + timedelta(minutes=5)} for i in range(RUNNING)])
        if inflight:
            now = datetime.now(UTC)
            connection.execute(insert(models.InflightReservation), [{
                "id": f"00000000-0000-4000-a000-{i:012d}", "host": workload.host((i * 7) % n, n),
                "instance_uuid": f"00000000-0000-4000-b000-{i:012d}", "group_id": None,
                "resources": {"VCPU": 1, "MEMORY_MB": 512}, "gpus": [], "created_at": now,
                "expires_at": now + timedelta(hours=6)} for i in range(inflight)])
    engine.dispose()
    return url


def view_memory(url: str) -> float:
    """MiB that one knowledge view of the database's fleet takes (tracemalloc)."""
    engine = make_engine(url)
    tracemalloc.start()
    view = load_view(engine)
    size = tracemalloc.get_traced_memory()[0] / 2**20
    tracemalloc.stop()
    del view
    engine.dispose()
    return size


# Run in a fresh interpreter: what one gunicorn worker holds, in MiB of resident memory,
# and how long the first load of the knowledge view takes there.
_WORKER_MEMORY = """
import json, sys, time
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
    answer = client.post("/scheduler/nova/external", data=open(body, "rb").read(),
                         content_type="application/json")
    assert answer.status_code == 200 and answer.get_json()["hosts"], answer.get_data()
app.extensions["cortex"].decisions.close()
print(json.dumps([started, viewed, rss()]))
"""

# Run in a fresh interpreter: seconds the first load of the view takes there.
_VIEW_LOAD = """
import sys, time
import cortex.plugins.registry
from cortex.db.engine import make_engine
from cortex.knowledge.loader import load_view
cortex.plugins.registry.load_all()
engine = make_engine(sys.argv[1])
began = time.perf_counter()
load_view(engine)
print(time.perf_counter() - began)
"""


def view_load(url: str) -> float:
    """Seconds a fresh process takes to load the view of the database's fleet."""
    out = subprocess.run([sys.executable, "-c", _VIEW_LOAD, url], capture_output=True,
                         text=True, check=True, cwd=REPO,
                         env=os.environ | {"PYTHONPATH": str(REPO)})
    return float(out.stdout.strip().splitlines()[-1])


def worker_memory(workload: Workload, n: int, url: str, tmp: str
                  ) -> tuple[float, float, float]:
    """A fresh worker process: resident MiB with the code imported, with the app and the
    view of N hosts loaded, after the bodies.

    The requests (every body, naming all N hosts) fill the facts the plugins keep in
    the view. Linux only (``/proc/self/status``).
    """
    paths = []
    for name, payload in workload.bodies(n).items():
        path = Path(tmp) / f"{name}-{n}.json"
        path.write_bytes(payload)
        paths.append(str(path))
    out = subprocess.run([sys.executable, "-c", _WORKER_MEMORY, url, *paths],
                         capture_output=True, text=True, check=True, cwd=REPO,
                         env=os.environ | {"PYTHONPATH": str(REPO)})
    return tuple(json.loads(out.stdout.strip().splitlines()[-1]))


def earlier_worker(url: str, settings: list[str], payload: bytes) -> None:
    """A worker that served ``payload`` once and stopped, as before a restart or a deploy:
    the database then holds that request shape for the next worker's warm-up."""
    process, port = serve("cortex.wsgi:application", 1, environment(url, settings))
    try:
        answered(http.client.HTTPConnection("127.0.0.1", port, timeout=30), payload)
        engine = make_engine(url)
        deadline = time.monotonic() + 30
        with engine.connect() as connection:
            while not connection.execute(text("SELECT count(*) FROM request_shapes")).scalar():
                if time.monotonic() > deadline:
                    raise SystemExit("the earlier worker stored no request shape")
                time.sleep(0.1)
                connection.rollback()
        engine.dispose()
    finally:
        process.terminate()
        process.wait(timeout=30)


def first_calls(port: int, bodies: dict[str, bytes], requests: int, never_seen: bool
                ) -> tuple[float, float | None, float, float]:
    """On a fresh worker: (first call ms, another body's first call ms or None, warm p50
    ms, warm ms after idling).

    The second body's first call is made when ``never_seen`` (no worker met its shape
    yet). The last is the median of five warm calls each made after 0.5 s without a
    call: a fresh worker's first call also comes after its worker sat idle, and this
    2-vCPU machine runs the same work 2-4x slower after a few idle milliseconds than
    back to back, whatever the code.
    """
    (_, first), (_, second) = list(bodies.items())[:2]
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    cold = answered(connection, first) * 1000
    new_shape = answered(connection, second) * 1000 if never_seen else None
    samples = sorted(answered(connection, first) for _ in range(requests))
    idle = []
    for _ in range(5):
        time.sleep(0.5)
        idle.append(answered(connection, first) * 1000)
    return cold, new_shape, statistics.median(samples) * 1000, statistics.median(idle)


def fresh_workers(workload: Workload, n: int, tmp: str, args) -> str:
    """The fresh-worker line at N hosts: ``args.first_workers`` workers started one after
    another, after an earlier one served the first body once and stopped.

    One first call per worker is one sample, where a warm p50 is the median of many:
    on a shared machine a single sample lands anywhere in the calls' spread, so the line
    gives the median first call over the workers (and their range) against the median
    of their warm p50s.
    """
    url = database(workload, n, tmp)
    bodies = workload.bodies(n)
    earlier_worker(url, args.set, next(iter(bodies.values())))
    colds, warms, idles, new_shape = [], [], [], None
    for worker in range(args.first_workers):
        process, port = serve("cortex.wsgi:application", 1, environment(url, args.set))
        try:
            cold, shape, warm, idle = first_calls(port, bodies, min(args.requests, 100),
                                                  never_seen=worker == 0)
        finally:
            process.terminate()
            process.wait(timeout=30)
        colds.append(cold)
        warms.append(warm)
        idles.append(idle)
        new_shape = shape if shape is not None else new_shape
    cold, warm, idle = (statistics.median(v) for v in (colds, warms, idles))
    return (f"{n:6d} hosts, {len(colds)} fresh workers: first call {cold:.1f} ms median "
            f"({min(colds):.1f}-{max(colds):.1f}; a shape an earlier worker met), first "
            f"call of a shape never seen {new_shape:.1f} ms, then p50 {warm:.2f} ms, "
            f"{idle:.2f} ms after 0.5 s idle (first / warm {cold / warm:.1f}, first / warm "
            f"after idling {cold / idle:.1f}, never seen / warm {new_shape / warm:.1f})")


def environment(url: str, settings: list[str]) -> dict[str, str]:
    """The Cortex server's environment: its database, no auth, promises living
    :data:`PROMISE_SECONDS`, and ``--set`` options."""
    return {"CORTEX_DATABASE_CONNECTION": url, "CORTEX_API_AUTH_STRATEGY": "noauth",
            "CORTEX_SCHEDULER_DECISION_QUEUE_SIZE": "100000",
            "CORTEX_SCHEDULER_RESERVATION_TTL": str(PROMISE_SECONDS)} | {
        f"CORTEX_{key.upper()}": value for key, value in (item.split("=", 1) for item in settings)}


def latency_table(workload: Workload, sizes: list[int], workers: list[int], args, tmp: str
                  ) -> None:
    """The main table: every body at every size and worker count, Cortex and the floors."""
    print(f"{'hosts':>6} {'body':15} {'wk':>2} {'answer':>6} {'bytes':>6} {'p50 ms':>8} "
          f"{'p99 ms':>8} {'req/s':>7} {'floor p50':>9} {'floor p99':>9} {'floor r/s':>9} "
          f"{'p50 x':>6} {'r/s share':>9} {'promised p50':>12} {'promised r/s':>12} "
          f"{'p50 x prom':>10} {'empty':>5} {'calls':>6} {'moves':>5} {'made':>6} {'refused':>7} "
          f"{'skipped':>7}",
          flush=True)
    promised_url = new_database("promised_floor", tmp)
    for n in sizes:
        url = database(workload, n, tmp, args.inflight)
        bodies = workload.bodies(n)
        for count in workers:
            servers = {"cortex": serve("cortex.wsgi:application", count,
                                       environment(url, args.set)),
                       "floor": serve("floor_app:application", count, {}),
                       "promised": serve("floor_app:promising", count,
                                         {"FLOOR_DATABASE_URL": promised_url,
                                          "FLOOR_PROMISE_SECONDS": str(PROMISE_SECONDS)})}
            try:
                for name, payload in bodies.items():
                    ours = Target("cortex", servers["cortex"][1], Traffic(payload), url)
                    floor = Target("floor", servers["floor"][1], Traffic(payload))
                    promised = Target("promised", servers["promised"][1], Traffic(payload))
                    measure([ours, floor, promised], args.requests, args.scrape_every)
                    calls, made, refused, skipped = ours.promises
                    note = (f"  ({ours.failed} calls under load answered 503)"
                            if ours.failed else "")
                    if ours.warm_failed:
                        note += f"  ({ours.warm_failed} warm-up calls answered 503)"
                    if ours.scrapes:
                        note += (f"  ({len(ours.scrapes)} scrapes, mean "
                                 f"{1000 * statistics.fmean(ours.scrapes):.1f} ms)")
                    us, fl, pr = ours.result(), floor.result(), promised.result()
                    print(f"{n:6d} {name:15} {count:2d} {us[3]:6d} {us[4]:6d} "
                          f"{us[0]:8.2f} {us[1]:8.2f} {us[2]:7.0f} {fl[0]:9.2f} "
                          f"{fl[1]:9.2f} {fl[2]:9.0f} {us[0] / fl[0]:6.2f} "
                          f"{us[2] / fl[2]:9.2f} {pr[0]:12.2f} {pr[2]:12.0f} "
                          f"{us[0] / pr[0]:10.2f} {ours.empty:5d} {calls:6d} "
                          f"{ours.traffic.moves:5d} {made:6d} {refused:7.0f} "
                          f"{skipped:7.0f}{note}", flush=True)
            finally:
                for process, _ in servers.values():
                    process.terminate()
                    process.wait(timeout=30)
        print(f"{n:6d} knowledge view: {view_memory(url):.1f} MiB traced", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fleet", choices=("gpu", "kvm"), default="gpu")
    parser.add_argument("--seed", type=int, default=1, help="the GPU fleet's seed")
    parser.add_argument("--sizes", default="100,1000")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--bodies", default="", help="comma-separated body names (all)")
    parser.add_argument("--first-sizes", default="1000",
                        help="fleet sizes to time a fresh worker's first calls at")
    parser.add_argument("--first-workers", type=int, default=5,
                        help="fresh workers to time the first calls of, one after another")
    parser.add_argument("--memory-sizes", default="10000",
                        help="fleet sizes to measure the view's load time and a worker's "
                             "resident memory at")
    parser.add_argument("--inflight", type=int, default=0,
                        help="other instances' unexpired reservations in the table")
    parser.add_argument("--scrape-every", type=float, default=0.0, metavar="SECONDS",
                        help="scrape Cortex's /metrics every SECONDS while timing (0: never)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION_OPTION=VALUE",
                        help="Cortex configuration for the run, e.g. "
                             "scheduler_reservation_feed=false (repeatable)")
    args = parser.parse_args()
    workload = Workload(args.fleet, args.seed, [b for b in args.bodies.split(",") if b])
    sizes = [int(s) for s in args.sizes.split(",") if s]
    with tempfile.TemporaryDirectory() as tmp:
        if sizes:
            latency_table(workload, sizes, [int(w) for w in args.workers.split(",")], args, tmp)
        for n in (int(s) for s in args.first_sizes.split(",") if s):
            print(fresh_workers(workload, n, tmp, args), flush=True)
        for n in (int(s) for s in args.memory_sizes.split(",") if s):
            url = database(workload, n, tmp)
            started, viewed, used = worker_memory(workload, n, url, tmp)
            loaded = min(view_load(url) for _ in range(3))
            print(f"{n:6d} hosts: view loaded in {loaded:.2f} s (best of 3); worker RSS "
                  f"{started:.0f} MiB imported, {viewed:.0f} MiB with the app and view "
                  f"({view_memory(url):.1f} MiB traced), {used:.0f} MiB after the bodies",
                  flush=True)


if __name__ == "__main__":
    main()
