"""What a fresh worker's first call does that a warm call does not: CPU time and steps asked.

Run: .venv/bin/python bench/first_call.py [--hosts 1000] [--workers 3] [--calls 20]

A loaded machine stretches a call's wall-clock time by whatever else runs, so one first
call against a warm median says little. This counts work instead, in the calling
thread: its CPU time (``time.thread_time``), its minor page faults, and how many host
answers the pipeline asked its plugins for rather than took from the kept answers
(:mod:`cortex.pipeline.memo`). As gunicorn runs a worker: the code imported
(:func:`cortex.wsgi.preload`), then a process forked that warms up
(:func:`cortex.wsgi.warm_up`) and serves; first one worker serves the body once and
stops (it stores its request shape, as before a restart), then each of ``--workers``
fresh workers serves ``--calls`` calls of the same body, each a new instance, through
the WSGI app in one thread. GPU fleet of bench/gpu_fleet.py in a PostgreSQL database of
its own (as bench/latency.py), the 2-GPU body.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="cortex-metrics-"))
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import latency  # noqa: E402

import cortex.pipeline.memo as memo  # noqa: E402
import cortex.wsgi  # noqa: E402

ASKED = [0]
_rows_to_ask = memo._rows_to_ask


def _counted(table, judged, rows):
    """memo._rows_to_ask, counting the host answers it leaves to the plugins."""
    found = _rows_to_ask(table, judged, rows)
    ASKED[0] += len(found[1])
    return found


def serve(traffic: latency.Traffic, calls: int) -> list[tuple[float, float, int, int]]:
    """In a fresh worker: (wall ms, CPU ms, minor faults, host answers asked) per call."""
    cortex.wsgi.warm_up(time.monotonic())
    client = cortex.wsgi.application.test_client()
    client.get("/healthcheck")
    found = []
    for _ in range(calls):
        ASKED[0] = 0
        before, cpu = resource.getrusage(resource.RUSAGE_THREAD), time.thread_time()
        started = time.perf_counter()
        answer = client.post("/scheduler/nova/external", data=traffic.next(),
                             content_type="application/json")
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_THREAD)
        if answer.status_code != 200 or not answer.get_json()["hosts"]:
            raise SystemExit(f"status {answer.status_code}: {answer.get_data()[:200]!r}")
        found.append((wall * 1000, (time.thread_time() - cpu) * 1000,
                      after.ru_minflt - before.ru_minflt, ASKED[0]))
    cortex.wsgi.shutdown()
    return found


def forked(traffic: latency.Traffic, calls: int, out: str) -> None:
    """Run :func:`serve` in a forked child, its numbers written to ``out``."""
    pid = os.fork()
    if pid == 0:
        try:
            rows = serve(traffic, calls)
            Path(out).write_text("\n".join(",".join(map(str, r)) for r in rows))
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    memo._rows_to_ask = _counted
    cortex.wsgi.preload()
    with tempfile.TemporaryDirectory() as tmp:
        workload = latency.Workload("gpu", 1, ["2gpu-required"])
        url = latency.database(workload, args.hosts, tmp)
        os.environ.update(latency.environment(url, []))
        traffic = latency.Traffic(workload.bodies(args.hosts)["2gpu-required"])
        out = str(Path(tmp) / "calls.csv")
        forked(traffic, 1, out)  # the earlier worker: its shape is stored
        firsts, warms = [], []
        for _ in range(args.workers):
            forked(traffic, args.calls, out)
            rows = [tuple(float(v) for v in line.split(","))
                    for line in Path(out).read_text().splitlines()]
            firsts.append(rows[0])
            warms.extend(rows[1:])
        print(f"{args.hosts} hosts, {args.workers} fresh workers, median per call: "
              "wall ms, CPU ms, minor page faults, host answers asked of the plugins")
        for name, rows in (("first call", firsts), ("later calls", warms)):
            print(f"  {name:12} " + "  ".join(f"{statistics.median(r[i] for r in rows):8.1f}"
                                            for i in range(4)))


if __name__ == "__main__":
    main()
