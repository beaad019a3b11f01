"""Measure what a caller sees when the database hangs, comes back, or is merely quiet.

Runs the API in-process (the WSGI app, one thread per concurrent caller) on a private
PostgreSQL cluster (tests/pg_cluster.py: initdb + pg_ctl on a free port; as root it runs
the server as user postgres), loaded with the demo fleet, with the shipped defaults
but for ``[database] max_knowledge_age`` (``--max-age``, short so the run is short).
"Hung" is SIGSTOP on every server process: sockets open, nothing answers. Prints:

- the Nova call latency with a healthy database (median of 50);
- a burst of concurrent Nova and Cinder calls and a /healthcheck right after the
  freeze: slowest answer and statuses;
- the calls during the freeze: how fast they are answered, and when the first 503 comes
  (the knowledge passes max_knowledge_age);
- the recovery after SIGCONT: seconds until /healthcheck is 200 and a Nova call is
  answered with a promise again (``--rounds`` freezes of ``--freeze`` s each);
- after ``--silence`` s without any request: the knowledge age and the first answer;
- with ``--gunicorn``: the burst again by HTTP through gunicorn with the sample settings
  (2 workers x 4 threads: 8 request slots), 24 Nova calls and more at once; then
  ``--rounds`` freezes of ``--freeze`` s, each followed by the recovery by HTTP: seconds
  after SIGCONT until 8 healthchecks in a row (both workers) carry no
  ``X-Cortex-Degraded`` and 4 Nova calls in a row are answered promised
  (``cortex_scheduler_unpromised_answers_total`` does not move).

Usage: ``python bench/faults.py [--max-age 6] [--freeze 10] [--rounds 8] [--silence 20]
[--gunicorn]``.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cortex import conf as config  # noqa: E402
from cortex.api.app import create_app  # noqa: E402
from cortex.db import migrate  # noqa: E402
from cortex.db.engine import make_engine  # noqa: E402
from cortex.store.fleet import import_fleet, read_fleet  # noqa: E402
from tests.pg_cluster import temporary_cluster  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures"
NOVA = json.loads((FIXTURES / "nova" / "cpu-general-purpose.json").read_text())
CINDER = json.loads((FIXTURES / "cinder" / "create-volume-default-type.json").read_text())


def call(app, service: str, body: dict) -> tuple[int, float]:
    """``(status, seconds)`` of one external call."""
    started = time.monotonic()
    response = app.test_client().post(f"/scheduler/{service}/external",
                                      data=json.dumps(body), content_type="application/json")
    elapsed = time.monotonic() - started
    if response.status_code == 200 and not response.get_json()["hosts"]:
        raise SystemExit(f"{service}: answered [] - the pipeline's steps did not run")
    return response.status_code, elapsed


def health(app) -> tuple[int, float]:
    """``(status, seconds)`` of ``GET /healthcheck``."""
    started = time.monotonic()
    status = app.test_client().get("/healthcheck").status_code
    return status, time.monotonic() - started


def unpromised(app) -> float:
    """Nova answers sent without a promise so far."""
    counter = getattr(app.extensions["cortex"].metrics, "unpromised_answers", None)
    return 0.0 if counter is None else counter.labels("nova")._value.get()


def burst(app, calls: list) -> list[tuple[int, float]]:
    """Run ``calls`` (callables) at once; their results."""
    results: list = [None] * len(calls)

    def run(i, f):
        results[i] = f()

    threads = [threading.Thread(target=run, args=(i, f)) for i, f in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def promised_call(app) -> bool:
    """One Nova call; whether it was answered 200 with its promise made."""
    before = unpromised(app)
    status, _ = call(app, "nova", copy.deepcopy(NOVA))
    return status == 200 and unpromised(app) == before


def main() -> None:
    """Run the measurements and print them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-age", type=float, default=6.0)
    parser.add_argument("--freeze", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--silence", type=float, default=20.0)
    parser.add_argument("--gunicorn", action="store_true",
                        help="also send the burst through gunicorn (2 workers x 4 threads)")
    args = parser.parse_args()

    cluster = temporary_cluster().start()
    try:
        engine = make_engine(cluster.url)
        migrate.upgrade(engine)
        with engine.begin() as connection:
            import_fleet(connection, read_fleet(REPO / "etc" / "cortex" / "demo-fleet.yaml"))
        engine.dispose()
        conf = config.load(environ={}, overrides={
            "database.connection": cluster.url, "api.auth_strategy": "noauth",
            "database.max_knowledge_age": args.max_age})
        app = create_app(conf)
        budget = conf.get("scheduler", "request_time_budget")
        print(f"request_time_budget {budget:g} s, max_knowledge_age {args.max_age:g} s, "
              f"knowledge_check_interval {conf.get('database', 'knowledge_check_interval'):g}"
              f" s, max_retry_interval {conf.get('database', 'max_retry_interval'):g} s")
        for _ in range(10):
            call(app, "nova", copy.deepcopy(NOVA))
        healthy = [call(app, "nova", copy.deepcopy(NOVA))[1] for _ in range(50)]
        print(f"healthy: Nova call median {statistics.median(healthy) * 1000:.1f} ms")

        cluster.freeze()
        frozen_at = time.monotonic()
        first = burst(app, [lambda: call(app, "nova", copy.deepcopy(NOVA))] * 16
                      + [lambda: call(app, "cinder", copy.deepcopy(CINDER))] * 4
                      + [lambda: health(app)])
        print(f"hung: burst of 16 Nova + 4 Cinder + /healthcheck right after the freeze: "
              f"slowest {max(s for _, s in first):.2f} s, statuses "
              f"{sorted({st for st, _ in first})}, unpromised {unpromised(app):.0f}")
        during: list[tuple[float, int, float]] = []
        while time.monotonic() - frozen_at < args.max_age + 3:
            status, seconds = call(app, "nova", copy.deepcopy(NOVA))
            during.append((time.monotonic() - frozen_at, status, seconds))
            time.sleep(0.05)
        ok = [s for _, st, s in during if st == 200]
        unavailable = [(t, s) for t, st, s in during if st == 503]
        print(f"hung: {len(during)} sequential Nova calls; 200 (unpromised) in median "
              f"{statistics.median(ok) * 1000:.1f} ms, slowest {max(ok):.2f} s"
              if ok else "hung: no 200 answers")
        if unavailable:
            print(f"hung: first 503 {unavailable[0][0]:.1f} s after the freeze (the view "
                  f"passed max_knowledge_age); 503 answered in median "
                  f"{statistics.median(s for _, s in unavailable) * 1000:.1f} ms, slowest "
                  f"{max(s for _, s in unavailable):.2f} s")
        status, seconds = health(app)
        print(f"hung: /healthcheck then {status} in {seconds * 1000:.1f} ms")
        recoveries = []
        for round_ in range(args.rounds):
            if round_:  # thaw at a random moment of the checker's cycle
                cluster.freeze()
                time.sleep(args.freeze + random.uniform(0, 3))
            cluster.thaw()
            thawed = time.monotonic()
            healthy_at = promised_at = None
            while promised_at is None or healthy_at is None:
                now = time.monotonic() - thawed
                if healthy_at is None and health(app)[0] == 200:
                    healthy_at = now
                if promised_at is None and promised_call(app):
                    promised_at = time.monotonic() - thawed
                if now > 60:
                    break
                time.sleep(0.02)
            if healthy_at is None or promised_at is None:
                print(f"recovery {round_ + 1}: not recovered within 60 s "
                      f"(healthcheck {healthy_at}, promise {promised_at})", flush=True)
                continue
            recoveries.append((healthy_at, promised_at))
        print(f"recovery over {args.rounds} thaws: /healthcheck 200 after "
              f"{' '.join(f'{h:.2f}' for h, _ in recoveries)} s; Nova promised again after "
              f"{' '.join(f'{p:.2f}' for _, p in recoveries)} s (max "
              f"{max(p for _, p in recoveries):.2f} s)")

        time.sleep(args.silence)
        knowledge = app.extensions["cortex"].knowledge
        age = knowledge.age()
        status, seconds = call(app, "nova", copy.deepcopy(NOVA))
        print(f"silence: after {args.silence:g} s without a request (max_knowledge_age "
              f"{args.max_age:g} s) the knowledge is {age:.1f} s old; first Nova call "
              f"{status} in {seconds * 1000:.1f} ms")
        knowledge.close()
        app.extensions["cortex"].decisions.close()
        if args.gunicorn:
            through_gunicorn(cluster, args)
    finally:
        cluster.destroy()


def through_gunicorn(cluster, args) -> None:
    """The burst again through gunicorn (2 workers x 4 threads: 8 request slots), by HTTP."""
    import os
    import signal
    import socket
    import subprocess
    import tempfile
    import urllib.error
    import urllib.request
    from concurrent.futures import ThreadPoolExecutor

    def fetch(url, body=None, answer=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data,
                                     headers={"Content-Type": "application/json"})
        started = time.monotonic()
        try:
            with urllib.request.urlopen(req, timeout=10) as response:
                status = response.status
                if answer is not None:
                    answer.append((response.headers, response.read()))
        except urllib.error.HTTPError as exc:
            status = exc.code
        except OSError:
            status = 0  # Nova's 10 s timeout
        return status, time.monotonic() - started

    def healthy() -> bool:
        answer: list = []
        return fetch(f"{base}/healthcheck", answer=answer)[0] == 200 \
            and "X-Cortex-Degraded" not in answer[0][0]

    def unpromised() -> float:
        answer: list = []
        fetch(f"{base}/metrics", answer=answer)
        return sum(float(line.rsplit(" ", 1)[1]) for line in answer[0][1].decode().splitlines()
                   if line.startswith("cortex_scheduler_unpromised_answers_total{"))

    def answered() -> bool:
        """One Nova call answered 200; [] stops the run (the pipeline's steps never ran)."""
        answer: list = []
        if fetch(f"{base}/scheduler/nova/external", NOVA, answer=answer)[0] != 200:
            return False
        if not json.loads(answer[0][1])["hosts"]:
            raise SystemExit("nova through gunicorn: answered [] - the steps did not run")
        return True

    def promised() -> bool:
        before = unpromised()
        return all(answered() for _ in range(4)) and unpromised() == before

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    env = os.environ | {"CORTEX_DATABASE_CONNECTION": cluster.url, "CORTEX_WORKERS": "2",
                        "CORTEX_THREADS": "4", "CORTEX_API_AUTH_STRATEGY": "noauth",
                        "PROMETHEUS_MULTIPROC_DIR": tempfile.mkdtemp()}
    env.pop("CORTEX_CONFIG_FILE", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", str(REPO / "etc/cortex/gunicorn.conf.py"),
         "--bind", f"127.0.0.1:{port}", "cortex.wsgi:application"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        until = time.monotonic() + 30
        while time.monotonic() < until:
            if fetch(f"{base}/healthcheck")[0] == 200:
                break
            time.sleep(0.2)
        for _ in range(20):
            fetch(f"{base}/scheduler/nova/external", NOVA)
        cluster.freeze()
        calls = [(f"{base}/scheduler/nova/external", NOVA)] * 24 \
            + [(f"{base}/scheduler/cinder/external", CINDER)] * 4 + [(f"{base}/healthcheck",)] * 4
        with ThreadPoolExecutor(len(calls)) as pool:
            results = list(pool.map(lambda c: fetch(*c), calls))
        print(f"gunicorn (8 slots), hung: 24 Nova + 4 Cinder + 4 /healthcheck at once: slowest "
              f"{max(s for _, s in results):.2f} s, median "
              f"{statistics.median(s for _, s in results) * 1000:.0f} ms, statuses "
              f"{sorted({st for st, _ in results})}")
        cluster.thaw()
        recoveries = []
        for _ in range(args.rounds):
            time.sleep(2)
            cluster.freeze()
            for _ in range(8):  # both workers find the database gone
                fetch(f"{base}/scheduler/nova/external", NOVA)
            time.sleep(args.freeze + random.uniform(0, 3))
            cluster.thaw()
            thawed = time.monotonic()
            while time.monotonic() - thawed < 60:
                if all(healthy() for _ in range(8)) and promised():
                    recoveries.append(time.monotonic() - thawed)
                    break
                time.sleep(0.02)
        print(f"gunicorn recovery over {args.rounds} thaws: healthy and promising again "
              f"after {' '.join(f'{r:.2f}' for r in recoveries)} s "
              f"(max {max(recoveries, default=float('nan')):.2f} s)")
    finally:
        cluster.thaw()
        process.send_signal(signal.SIGTERM)
        process.wait(30)


if __name__ == "__main__":
    main()
