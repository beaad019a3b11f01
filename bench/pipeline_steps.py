"""Engine time of every shipped pipeline on its service's bundled bodies, and its costliest step.

Run: .venv/bin/python bench/pipeline_steps.py [--repeat N]
Runs the pipeline engine alone (no HTTP, no JSON schema, no decision log) against the
demo fleet in an embedded SQLite database; prints p50/p99 in milliseconds per
pipeline and body, and the step with the largest median duration.
"""

import argparse
import json
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from cortex import conf
from cortex.db import migrate
from cortex.db.engine import make_engine
from cortex.knowledge.loader import load_view
from cortex.pipeline.config import load_pipelines
from cortex.pipeline.engine import run_pipeline
from cortex.request import PARSERS
from cortex.store.fleet import import_fleet, read_fleet

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=100)
    args = parser.parse_args()
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
