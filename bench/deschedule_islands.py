"""What the descheduler wins back on a churned fleet: free 8-GPU NVLink cells, before and after.

Run: .venv/bin/python bench/deschedule_islands.py [--fleet mixed] [--seeds 10]

For each seed: a synthetic timeline for the fleet (``--requests`` requests, ``--load``
offered GPU load, exponential lifetimes) is replayed through each pipeline up to the
arrival of request ``--stop`` (the cloud as churn left it: instances come and went),
then ``cortex.simulator.deschedule.win_back`` runs descheduler passes with the shipped
``detector_gpu_island`` (every target chosen by the same pipeline, passthrough GPU
instances cold-migrated). Prints per pipeline and seed the free whole 8-GPU NVLink
cells and the GPUs in whole free NVLink cells before and after, the instances placed,
the moves made and the GPUs those instances hold, and the means over the seeds.
"""

from __future__ import annotations

import argparse
import statistics
import time

from cortex import conf
from cortex.pipeline.config import load_pipelines
from cortex.plugins.detectors.gpu_island import GpuIslandDetector
from cortex.simulator.deschedule import win_back
from cortex.simulator.fleet import read_fleet
from cortex.simulator.session import resolve_fleet
from cortex.simulator.trace import SyntheticSpec, synthetic_trace

PIPELINES = ("kvm-gpu-topology-aware", "kvm-gpu-bin-packing", "nova-baseline")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleet", default="mixed")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--stop", type=int, default=1200)
    parser.add_argument("--load", type=float, default=0.9)
    args = parser.parse_args()
    fleet = read_fleet(resolve_fleet(args.fleet))
    pipelines = load_pipelines(conf.shipped_file("pipelines.yaml"))
    print(f"fleet {args.fleet}: {len(fleet.hosts)} hosts, {fleet.gpus} GPUs; {args.seeds} seeds, "
          f"{args.requests} requests at load {args.load}, stopped at request {args.stop}\n")
    print("| pipeline | seed | free 8-GPU cells before → after | whole-cell GPUs before → after "
          "| instances | moves | GPUs moved | s |")
    print("|---|---|---|---|---|---|---|---|")
    for pipeline in PIPELINES:
        rows = []
        for seed in range(1, args.seeds + 1):
            trace = synthetic_trace(fleet, SyntheticSpec(requests=args.requests, seed=seed,
                                                         load=args.load))
            started = time.perf_counter()
            result = win_back(fleet, trace, pipelines, pipeline, trace[args.stop].arrival,
                              [GpuIslandDetector()])
            took = time.perf_counter() - started
            assert result.instances > 0, "nothing placed: the steps did not run"
            rows.append(result)
            print(f"| {pipeline} | {seed} | {result.cells_before} → {result.cells_after} | "
                  f"{result.whole_gpus_before} → {result.whole_gpus_after} | "
                  f"{result.instances} | {len(result.moves)} | {result.gpus_moved} | "
                  f"{took:.1f} |")
        before = statistics.mean(r.cells_before for r in rows)
        after = statistics.mean(r.cells_after for r in rows)
        moves = statistics.mean(len(r.moves) for r in rows)
        print(f"| {pipeline} | mean | {before:.1f} → {after:.1f} | "
              f"{statistics.mean(r.whole_gpus_before for r in rows):.1f} → "
              f"{statistics.mean(r.whole_gpus_after for r in rows):.1f} | "
              f"{statistics.mean(r.instances for r in rows):.1f} | {moves:.1f} | "
              f"{statistics.mean(r.gpus_moved for r in rows):.1f} | |")


if __name__ == "__main__":
    main()
