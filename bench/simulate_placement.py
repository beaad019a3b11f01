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

``--fast`` replays with the steps' per-host answers carried between events
(``cortex.simulator.replay.CarriedAnswers``; the same decisions); ``--only SCENARIO``
runs only the scenarios named.

``--whole-fleet`` runs Weng et al.'s setting instead: every GPU node of the trace (1,213
nodes, 6,212 GPUs), every GPU shared any way (``gpu_sharing: any``, ``--vgpu-slots``
vGPUs a GPU), per seed a workload drawn from ``--pod-list`` with replacement until it asks
``--level`` x the fleet's GPUs (``cortex.simulator.trace.inflate``), replayed fast through
``--policy`` (default: Cortex with the trace's fragmentation sizes, bin-packing, Nova's
arithmetic, FGD, best-fit); prints the unallocated GPUs (% of the fleet's) at each
arrived level, a JSON line per replay to ``--out`` as it goes.
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
    ("all NVLink where the fleet has such a set %",
     lambda r: 100 * (r.nvlink_fleet_share or 0), "{:.1f}"),
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


WHOLE_FLEET_POLICIES = ("kvm-gpu-topology-aware", "kvm-gpu-bin-packing", "nova-baseline",
                        "fgd", "best-fit")
ARRIVED = (50, 70, 80, 90, 95, 100)


def whole_fleet_run(args: tuple) -> dict:
    """One replay of the whole fleet (a worker's job): its measures as a dict."""
    trace_dir, pod_list, slots, level, seed, policy = args
    from cortex.simulator.session import request_sizes, trace_sizes
    from cortex.simulator.trace import inflate

    overrides = {"gpu_sharing": "any", "vgpu_slots": slots}
    fleet = read_fleet(trace_dir / "openb_node_list_gpu_node.csv", overrides=overrides)
    pool = read_trace(trace_dir / pod_list, "fill", overrides=overrides)
    gpus = sum(len(h.board.get("gpus") or ()) or h.board.get("gpu_count", 0)
               for h in fleet.hosts)
    trace = inflate(pool, gpus, level, seed, slots)
    pipelines = load_pipelines(conf.shipped_file("pipelines.yaml"))
    sizes = None
    if policy == "kvm-gpu-topology-aware":
        sizes, pipelines = request_sizes(trace), trace_sizes(pipelines, trace)
    started = time.process_time()
    run = replay(fleet, trace, pipelines, policy, request_sizes=sizes, fast=True)
    return {"policy": policy, "seed": seed, "pod_list": pod_list, "vgpu_slots": slots,
            "hosts": len(fleet.hosts), "gpus": run.passthrough_gpus,
            "requests": len(trace), "placed": run.placed,
            "placed_before_first_rejection": run.placed_before_first_rejection,
            "unallocated_pct": dict(zip(map(str, ARRIVED), run.unallocated_curve(ARRIVED),
                                        strict=True)),
            "nvlink_complete_pct": 100 * (run.nvlink_possible_share or 0),
            "nvlink_fleet_pct": 100 * (run.nvlink_fleet_share or 0),
            "numa_local_pct": 100 * (run.numa_local_share or 0),
            "wall_s": run.wall_s, "cpu_s": time.process_time() - started}


def whole_fleet(args: argparse.Namespace) -> None:
    """The ``--whole-fleet`` scenario: every replay, then the table of means over seeds."""
    import json
    from concurrent.futures import ProcessPoolExecutor

    jobs = [(args.trace_dir, args.pod_list, args.vgpu_slots, args.level, seed, policy)
            for seed in range(args.first_seed, args.first_seed + args.seeds)
            for policy in args.policy]
    started = time.perf_counter()
    found = []
    with ProcessPoolExecutor(args.jobs) as pool, open(args.out, "a") as out:
        for result in pool.map(whole_fleet_run, jobs):
            found.append(result)
            out.write(json.dumps(result) + "\n")
            out.flush()
            print(f"{result['policy']} seed {result['seed']}: {result['wall_s']:.0f} s wall, "
                  f"{result['cpu_s']:.0f} s CPU", flush=True)
    print(f"\n{len(found)} replays in {time.perf_counter() - started:.0f} s\n")
    print("| policy | seeds | requests | placed before 1st rejection | unallocated GPUs at "
          + " / ".join(f"{a} %" for a in ARRIVED)
          + " arrived | NVLink-complete | NVLink-complete (fleet) | NUMA-local |")
    print("|---|---|---|---|---|---|---|---|")
    for policy in args.policy:
        runs = [r for r in found if r["policy"] == policy]
        curve = []
        for level in map(str, ARRIVED):
            values = [r["unallocated_pct"][level] for r in runs
                      if r["unallocated_pct"][level] is not None]
            curve.append(f"{statistics.fmean(values):.1f}" if values else "n/a")
        print(f"| `{policy}` | {len(runs)} | {statistics.fmean(r['requests'] for r in runs):.0f}"
              f" | {statistics.fmean(r['placed_before_first_rejection'] for r in runs):.0f}"
              f" | {' / '.join(curve)} % "
              f"| {statistics.fmean(r['nvlink_complete_pct'] for r in runs):.1f} % "
              f"| {_fleet_pct(runs)} "
              f"| {statistics.fmean(r['numa_local_pct'] for r in runs):.1f} % |")


def _fleet_pct(runs: list[dict]) -> str:
    """The mean fleet-level NVLink-complete share of the runs (``n/a`` in older JSON lines)."""
    values = [r["nvlink_fleet_pct"] for r in runs if "nvlink_fleet_pct" in r]
    return f"{statistics.fmean(values):.1f} %" if values else "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace-dir", type=Path,
                        default=Path(__file__).resolve().parents[2] / "shared/traces/"
                        "alibaba-gpu-v2023")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--alibaba-samples", type=int, default=4)
    parser.add_argument("--fast", action="store_true")
    parser.add_argument("--only", action="append", metavar="SCENARIO")
    parser.add_argument("--whole-fleet", action="store_true")
    parser.add_argument("--pod-list", default="openb_pod_list_default.csv")
    parser.add_argument("--vgpu-slots", type=int, default=100)
    parser.add_argument("--level", type=float, default=1.0)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--policy", action="append")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--out", default="whole-fleet.jsonl")
    args = parser.parse_args()
    if args.whole_fleet:
        args.policy = args.policy or list(WHOLE_FLEET_POLICIES)
        whole_fleet(args)
        return
    pipelines = load_pipelines(conf.shipped_file("pipelines.yaml"))
    results: dict[tuple[str, str], list] = {}
    started, cpu = time.perf_counter(), time.process_time()
    for scenario, fleet, trace in scenarios(args.trace_dir, args.seeds, args.alibaba_samples):
        if args.only and scenario not in args.only:
            continue
        for pipeline in PIPELINES:
            run = replay(fleet, trace, pipelines, pipeline, fast=args.fast)
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
          f"{time.perf_counter() - started:.0f} s ({time.process_time() - cpu:.1f} s of CPU)")


if __name__ == "__main__":
    main()
