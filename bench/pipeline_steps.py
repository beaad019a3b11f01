"""Engine time of every shipped pipeline on its service's bundled bodies, and its costliest
step; or, with ``--phases N``, where a real create's time goes in the app at N GPU hosts.

Run: .venv/bin/python bench/pipeline_steps.py [--repeat N]
     [--phases 1000 [--body NAME] [--inflight 3000]]
Without ``--phases``: the pipeline engine alone (no HTTP, no JSON schema, no decision
log) against the demo fleet in an embedded SQLite database; prints p50/p99 in
milliseconds per pipeline and body, and the step with the largest median duration.

``--phases N``: the app in this process (Flask's test client, no gunicorn, no socket) on
bench/gpu_fleet.py's N-host fleet in PostgreSQL (bench/latency.py's database), every
call a new instance as bench/latency.py sends them, after the warm-up a gunicorn worker
runs; prints each phase's mean milliseconds per call, its share and its median: the body
read, the schema and the request's parse, the view and the pipeline's choice, the in-
flight reservations laid over the view, the pipeline, the promise, the decision record
(built, counted, handed to the writer), the request shape kept, the answer written, and
the rest (Flask, the test client, the writer's thread sharing the interpreter).
"""

import argparse
import json
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from cortex import conf
from cortex.db import migrate
from cortex.db.engine import make_engine
from cortex.knowledge.loader import load_view
from cortex.pipeline.config import load_pipelines
from cortex.pipeline.engine import run_pipeline
from cortex.request import PARSERS
from cortex.store.fleet import import_fleet, read_fleet

REPO = Path(__file__).resolve().parents[1]


#: (phase, module, attribute): the functions each phase of a call spends its time in.
PHASES = (
    ("body read", "cortex.api.scheduler", "read_json_body"),
    ("schema + parse", "cortex.api.scheduler", "parse"),
    ("view + choice", "cortex.knowledge.cache", "KnowledgeCache.view"),
    ("view + choice", "cortex.scheduler.service", "choose_pipeline"),
    ("overlay", "cortex.scheduler.service", "SchedulerService._in_flight"),
    ("overlay", "cortex.scheduler.service", "request_view"),
    ("pipeline", "cortex.scheduler.service", "run_pipeline"),
    ("promise", "cortex.scheduler.service", "promise"),
    ("decision record", "cortex.scheduler.recorder", "CallRecorder.answered"),
    ("request shape", "cortex.store.shapes", "ShapeLog.meet"),
    ("answer", "cortex.api.scheduler", "answer"),
)


def _timed(spent: dict[str, float], phase: str, function: Any) -> Any:
    """``function`` adding its seconds to ``spent[phase]`` (the outermost call only)."""
    def timed(*args, **kwargs):
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            spent[phase] += time.perf_counter() - started
    return timed


def phases(n: int, body_name: str, repeat: int, inflight: int = 0) -> None:
    """Per-phase ms of ``repeat`` real creates of ``body_name`` at ``n`` GPU hosts, with
    ``inflight`` other instances' unexpired reservations (bench/latency.py's)."""
    import importlib
    import sys

    sys.path.insert(0, str(REPO / "bench"))
    import latency

    from cortex.api.app import create_app
    from cortex.services.warmup import serving_collector, warm_up
    from cortex.store.reservation_feed import stop_all

    workload = latency.Workload("gpu", 1, [body_name])
    with tempfile.TemporaryDirectory() as tmp:
        url = latency.database(workload, n, tmp, inflight)
        spent: dict[str, float] = defaultdict(float)
        for phase, module, attribute in PHASES:
            owner: Any = importlib.import_module(module)
            *path, name = attribute.split(".")
            for part in path:
                owner = getattr(owner, part)
            setattr(owner, name, _timed(spent, phase, getattr(owner, name)))
        settings = {"database.connection": url, "api.auth_strategy": "noauth",
                    "scheduler.reservation_ttl": str(latency.PROMISE_SECONDS)}
        app = create_app(conf.load(environ={}, overrides=settings))
        serving_collector()
        warm_up(app)  # as a gunicorn worker before it serves
        client, traffic = app.test_client(), latency.Traffic(workload.bodies(n)[body_name])
        rows: dict[str, list[float]] = defaultdict(list)
        for number in range(repeat + 20):
            payload = traffic.next()
            spent.clear()
            started = time.perf_counter()
            answer = client.post("/scheduler/nova/external", data=payload,
                                 content_type="application/json")
            total = time.perf_counter() - started
            if answer.status_code != 200 or not answer.get_json()["hosts"]:
                raise SystemExit(f"answered {answer.status_code} {answer.get_data()[:200]!r}")
            if number < 20:  # warm-up
                continue
            for phase, seconds in spent.items():
                rows[phase].append(seconds * 1000)
            rows["rest"].append((total - sum(spent.values())) * 1000)
            rows["total"].append(total * 1000)
        app.extensions["cortex"].decisions.close()
        app.extensions["cortex"].knowledge.close()
        stop_all()
    whole = statistics.fmean(rows["total"])
    print(f"{n} GPU hosts, {inflight} reservations of others, {body_name}, {repeat} real "
          f"creates: ms per call, the mean (the "
          f"means add up) and the median")
    for phase in [*dict.fromkeys(p for p, _, _ in PHASES), "rest", "total"]:
        value = sum(rows[phase]) / len(rows["total"])
        middle = statistics.median(rows[phase]) if rows[phase] else 0.0
        print(f"  {phase:16} {value:7.3f}  {100 * value / whole:5.1f} %  {middle:7.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=100)
    parser.add_argument("--phases", type=int, default=0, metavar="HOSTS",
                        help="time a real create's phases in the app at HOSTS GPU hosts")
    parser.add_argument("--body", default="2gpu-required", help="the --phases body")
    parser.add_argument("--inflight", type=int, default=0,
                        help="--phases: other instances' unexpired reservations")
    args = parser.parse_args()
    if args.phases:
        phases(args.phases, args.body, args.repeat, args.inflight)
        return
    with tempfile.TemporaryDirectory() as tmp:
        engine = make_engine(f"sqlite:///{tmp}/bench.sqlite")
        migrate.upgrade(engine)
        with engine.begin() as connection:
            import_fleet(connection, read_fleet(REPO / "etc/cortex/demo-fleet.yaml"))
        view = load_view(engine)
    pipelines = load_pipelines(conf.shipped_file("pipelines.yaml")).pipelines
    print(f"{'pipeline':38} {'body':36} {'p50 ms':>7} {'p99 ms':>7}  costliest step")
    for name, pipeline in sorted(pipelines.items()):
        for path in sorted((REPO / "tests/fixtures" / pipeline.service).glob("*.json")):
            request = PARSERS[pipeline.service](json.loads(path.read_text()))
            samples, steps = [], defaultdict(list)
            for _ in range(args.repeat):
                started = time.perf_counter()
                result = run_pipeline(pipeline, request, view)
                samples.append((time.perf_counter() - started) * 1000)
                for step in result.steps:
                    steps[step.name].append(step.duration_ms)
            samples.sort()
            p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
            worst = max(steps, key=lambda s: statistics.median(steps[s]))
            print(f"{name:38} {path.stem[:36]:36} {statistics.median(samples):7.3f} "
                  f"{p99:7.3f}  {worst} {statistics.median(steps[worst]):.3f}")


if __name__ == "__main__":
    main()
