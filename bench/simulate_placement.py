"""Placement quality of kvm-gpu-topology-aware against kvm-gpu-bin-packing and nova-baseline.

Run: .venv/bin/python bench/simulate_placement.py [--trace-dir ../shared/traces/alibaba-gpu-v2023]
     [--seeds 5] [--alibaba-samples 4]

Scenarios (each replayed through the three pipelines by cortex.simulator, as
``cortex-manage simulate`` does, on a fresh fleet each time):

* hgx, mixed: the shipped fleets, a synthetic timeline (2,000 requests, offered GPU load
  0.8, mean life 1 h) per seed;
* hgx-fill, mixed-fill: the same fleets filled by the first 300 requests of each seed's
  synthetic trace, which never leave (Weng et al.'s method, for their measure);
* alibaba-default: Alibaba's GPU nodes, every 8th node of each kind (a different eighth
  per sample), the default pod list in creation order, filling the fleet (no departures),
  first 2,000 pods;
* alibaba-multigpu50: the same fleet (first eighth), the multigpu50 pod list shuffled per
  seed (its multi-GPU pods are appended at the end of the file), first 1,500 pods.

Prints a Markdown table of means over seeds (samples) with the range in brackets, then
the paired differences with their 95 % intervals and the unallocated GPUs at 100 %
arrived (``cortex.simulator.report.summary``).
"""

import argparse
import dataclasses
import random
import statistics
import time
from pathlib import Path

from cortex import conf
from cortex.pipeline.config import load_pipelines
from cortex.simulator.fleet import read_fleet
from cortex.simulator.replay import replay
from cortex.simulator.report import summary
from cortex.simulator.session import resolve_fleet
from cortex.simulator.trace import SyntheticSpec, read_trace, synthetic_trace

PIPELINES = ("kvm-gpu-topology-aware", "kvm-gpu-bin-packing", "nova-baseline")
# Scenarios with departures: Weng et al.'s measure needs requests that stay.
TIMELINES = frozenset({"hgx", "mixed"})
METRICS = (
    ("placed before 1st rejection", lambda r: r.placed_before_first_rejection, "{:.0f}"),
    ("1st GPU rejection", lambda r: r.first_rejection_of("gpu") or len(r.decisions) + 1,
     "{:.0f}"),
    ("GPUs placed", lambda r: r.gpus_placed("gpus"), "{:.0f}"),
    ("vGPUs placed", lambda r: r.gpus_placed("vgpus"), "{:.0f}"),
    ("all NVLink %", lambda r: 100 * (r.nvlink_share or 0), "{:.1f}"),
    ("all NVLink where possible %", lambda r: 100 * (r.nvlink_possible_share or 0), "{:.1f}"),
    ("NUMA-local %", lambda r: 100 * (r.numa_local_share or 0), "{:.1f}"),
    ("frag. 4-GPU", lambda r: r.mean("frag4"), "{:.1f}"),
    ("frag. 8-GPU", lambda r: r.mean("frag8"), "{:.1f}"),
    ("decision ms p50", lambda r: r.decision_ms(0.5), "{:.1f}"),
)


def scenarios(trace_dir: Path, seeds: int, samples: int):
    """Yield ``(scenario, fleet, trace)`` for every run."""
    for name in ("hgx", "mixed"):
        fleet = read_fleet(resolve_fleet(name))
        for seed in range(1, seeds + 1):
            yield name, fleet, synthetic_trace(fleet, SyntheticSpec(requests=2000, seed=seed,
                                                                    load=0.8))
        # Weng et al.'s method on the same fleet: the requests never leave (300 are 2-3x
        # the fleet's GPUs, past the 120 % the measure is read at)
        for seed in range(1, seeds + 1):
            trace = synthetic_trace(fleet, SyntheticSpec(requests=300, seed=seed, load=0.8))
            yield f"{name}-fill", fleet, [dataclasses.replace(r, departure=None)
                                          for r in trace]
    nodes = trace_dir / "openb_node_list_gpu_node.csv"
    default = read_trace(trace_dir / "openb_pod_list_default.csv", "fill")[:2000]
    for offset in range(samples):
        yield "alibaba-default", read_fleet(nodes, 8, sample_offset=offset), default
    fleet = read_fleet(nodes, 8)
    multi = read_trace(trace_dir / "openb_pod_list_multigpu50.csv", "fill")
    for seed in range(1, seeds + 1):
        order = list(multi)
        random.Random(seed).shuffle(order)
        yield "alibaba-multigpu50", fleet, [dataclasses.replace(r, arrival=float(i))
                                            for i, r in enumerate(order[:1500])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace-dir", type=Path,
                        default=Path(__file__).resolve().parents[2] / "shared/traces/"
                        "alibaba-gpu-v2023")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--alibaba-samples", type=int, default=4)
    args = parser.parse_args()
    pipelines = load_pipelines(conf.shipped_file("pipelines.yaml"))
    results: dict[tuple[str, str], list] = {}
    started = time.perf_counter()
    for scenario, fleet, trace in scenarios(args.trace_dir, args.seeds, args.alibaba_samples):
        for pipeline in PIPELINES:
            run = replay(fleet, trace, pipelines, pipeline)
            results.setdefault((scenario, pipeline), []).append(run)
    print("| scenario | pipeline | runs | " + " | ".join(m for m, _, _ in METRICS) + " |")
    print("|" + "---|" * (3 + len(METRICS)))
    for (scenario, pipeline), runs in results.items():
        cells = []
        for _, measure, form in METRICS:
            values = [measure(r) for r in runs]
            cells.append(f"{form.format(statistics.fmean(values))} "
                         f"[{form.format(min(values))}-{form.format(max(values))}]")
        print(f"| {scenario} | `{pipeline}` | {len(runs)} | " + " | ".join(cells) + " |")
    print("\nPaired over seeds (samples), requests placed before the first rejection, "
          f"{PIPELINES[0]} against each other pipeline, and Weng et al.'s unallocated GPUs "
          "(% of the passthrough GPUs) at 100 % arrived (fill scenarios only):\n")
    print("| scenario | against | mean difference | 95 % interval | unallocated GPUs at 100 % "
          "arrived, per pipeline |")
    print("|---|---|---|---|---|")
    for scenario in dict.fromkeys(s for s, _ in results):
        by_seed = [list(runs) for runs in zip(*(results[(scenario, p)] for p in PIPELINES),
                                              strict=True)]
        found = summary(by_seed)
        unallocated = " / ".join(
            "n/a" if (v := found[p]["unallocated_gpu_pct_at"]["100"]) is None
            or scenario in TIMELINES else f"{v:.1f} %" for p in PIPELINES)
        for other, paired in found[PIPELINES[0]]["paired_vs"].items():
            low, high = paired["ci95"] or (paired["mean_diff_pct"],) * 2
            print(f"| {scenario} | `{other}` | {paired['mean_diff_pct']:+.1f} % | "
                  f"[{low:+.1f}, {high:+.1f}] % | {unallocated} |")
    print(f"\n{sum(len(r) for r in results.values())} replays in "
          f"{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
