"""MIG placement: slot-aware against first-fit slots and whole-GPU allocation of the same requests.

Run: .venv/bin/python bench/mig_placement.py [--trace-dir ../shared/traces/alibaba-gpu-v2023]
     [--hosts 3 4 5 6] [--seeds 5] [--loads 0.8 1.0 1.2] [--synthetic-hosts 4]
     .venv/bin/python bench/mig_placement.py --replay [--replay-fleets 1:1 1:2 2:2]

Fleet: hosts of 8 A100/H100 80GB GPUs with MIG on, no GPU partitioned at start; a GPU
instance is created per request and destroyed when it leaves (``cortex.simulator.mig``).
Requests: the GPU pods of Alibaba's ``openb_pod_list_default.csv``, a fractional pod as
the smallest MIG profile with its share of the GPU's compute (460 milli-GPU: 4g.40gb),
a whole-GPU pod as ``num_gpu`` 7g.80gb instances on one host.

* trace: the pods in creation order with their own departures, on ``--hosts`` host
  counts (no randomness);
* synthetic: per seed and offered load (GPUs asked at MIG size / the fleet's GPUs),
  3,000 requests drawn from the same pods' shapes, Poisson arrivals, exponential lives
  (mean 1 h), on ``--synthetic-hosts`` hosts.

Prints accepted requests per policy (synthetic: mean over seeds, range in brackets) and
the slot-aware policy's gain over whole-GPU allocation.

``--replay``: MIG in the pipelines' replays instead (``cortex.simulator.mig_replay``).
The fractional pods of the same pod list, each asking one vGPU of its profile (the same
mapping) as a Nova flavor asks it (``resources:VGPU=1``,
``trait:CUSTOM_NVIDIA_<profile>=required``), with their own departures, replayed through
``kvm-gpu-topology-aware`` and ``kvm-gpu-bin-packing`` (``cortex.simulator.replay``,
fast) on fleets of HGX H100 (8 GPUs) and A100 80GB PCIe (4 GPUs) hosts
(``--replay-fleets H100:A100`` host counts) whose GPUs are MIG-partitioned in a fixed
operator layout derived from the pods' peak demand per profile
(``cortex.simulator.mig.demand_layouts``), and on the same hosts with MIG disabled, the
same pods asking one whole GPU. No randomness. Prints per fleet, side and pipeline the
accepted requests, those placed before the first rejection, the unallocated GPU
capacity (mean over arrivals, and mean over the rejections, in % of the fleet's GPUs),
then the refused requests per profile.
"""

import argparse
import statistics
import time
from collections import Counter
from pathlib import Path

from cortex.simulator.mig import POLICIES, MigFleet, alibaba_requests, replay, synthetic_requests

GPUS_PER_HOST = 8
POD_LIST = "openb_pod_list_default.csv"


def _row(label: str, counts: dict[str, list[int]], total: int) -> str:
    cells = []
    for policy in POLICIES:
        values = counts[policy]
        mean = statistics.mean(values)
        spread = f" [{min(values)}-{max(values)}]" if len(values) > 1 else ""
        cells.append(f"{mean:.0f}{spread} ({100 * mean / total:.1f} %)")
    gain = statistics.mean(counts["slot-aware"]) / statistics.mean(counts["whole-gpu"]) - 1
    return f"| {label} | {total} | " + " | ".join(cells) + f" | {100 * gain:+.1f} % |"


REPLAY_PIPELINES = ("kvm-gpu-topology-aware", "kvm-gpu-bin-packing")
BOARDS = {"H100": "hgx-h100-8gpu", "A100": "a100-pcie-4gpu-nvlink-pairs"}


def replay_fleet(h100: int, a100: int):
    """``h100`` HGX H100 and ``a100`` A100 80GB PCIe hosts of the shipped boards, whole GPUs."""
    from cortex import conf
    from cortex.documents import load_document
    from cortex.simulator.fleet import BOARDS_FILE_SCHEMA, Fleet, HostSpec, SimulationError

    boards = load_document(conf.shipped_file("simulator/boards.yaml"), BOARDS_FILE_SCHEMA,
                           SimulationError)["boards"]
    hosts = [HostSpec(f"{kind.lower()}-{i:03d}", None, boards[BOARDS[kind]], BOARDS[kind])
             for kind, count in (("H100", h100), ("A100", a100)) for i in range(count)]
    return Fleet(f"{h100}xH100-{a100}xA100", tuple(hosts), "bench/mig_placement.py")


def replay_main(args: argparse.Namespace) -> None:
    """The ``--replay`` scenario: MIG layout against whole GPUs through the pipelines."""
    from cortex import conf
    from cortex.pipeline.config import load_pipelines
    from cortex.simulator.mig_replay import comparison
    from cortex.simulator.replay import replay as replay_pipeline
    from cortex.simulator.trace import read_trace

    pipelines = load_pipelines(conf.shipped_file("pipelines.yaml"))
    trace = read_trace(args.trace_dir / POD_LIST, "timeline", mig=True)
    started, cpu = time.perf_counter(), time.process_time()
    refused_rows = []
    print("| fleet | GPUs | side | pipeline | requests | accepted | placed before 1st "
          "rejection | unallocated GPUs, mean over arrivals | unallocated GPUs at rejections |")
    print("|---|---|---|---|---|---|---|---|---|")
    for spec in args.replay_fleets:
        h100, a100 = (int(n) for n in spec.split(":"))
        fleet = replay_fleet(h100, a100)
        sides = []
        for sizing in args.replay_sizing:
            case = comparison(fleet, trace, sizing)
            layouts = Counter(" + ".join(layout) for layout in case.layouts)
            print(f"<!-- {fleet.name}, MIG layout by {sizing}: " + "; ".join(
                f"{n} x {layout}" for layout, n in layouts.most_common()) + " -->")
            sides.append((f"MIG layout by {sizing}", case.mig_fleet, case.mig_trace))
        sides.append(("whole GPUs", case.whole_fleet, case.whole_trace))
        profile = {r.id: r.mig_profile for r in case.mig_trace}
        for side, side_fleet, side_trace in sides:
            for pipeline in REPLAY_PIPELINES:
                run = replay_pipeline(side_fleet, side_trace, pipelines, pipeline, fast=True)
                total, gpus = len(run.decisions), run.fleet_gpus
                refused = [d for d in run.decisions if d.host is None]
                at_rejection = "n/a"
                if refused:
                    free = statistics.fmean(d.free_gpus for d in refused)
                    at_rejection = f"{100 * free / gpus:.1f} %"
                print(f"| {fleet.name} | {gpus} | {side} | `{pipeline}` | {total} | "
                      f"{run.placed} ({100 * run.placed / total:.1f} %) | "
                      f"{run.placed_before_first_rejection} | "
                      f"{100 * run.mean('free_gpus') / gpus:.1f} % | {at_rejection} |")
                by_profile = Counter(profile[d.request_id] for d in refused)
                refused_rows.append((fleet.name, side, pipeline, by_profile))
    names = sorted({p for r in trace if (p := r.mig_profile)})
    asked = Counter(r.mig_profile for r in trace if r.mig_profile)
    print("\nRefused requests per profile (asked: " + ", ".join(
        f"{p} {asked[p]}" for p in names) + ")\n")
    print("| fleet | side | pipeline | " + " | ".join(names) + " |")
    print("|---|---|---|" + "---|" * len(names))
    for name, side, pipeline, by_profile in refused_rows:
        print(f"| {name} | {side} | `{pipeline}` | "
              + " | ".join(str(by_profile[p]) for p in names) + " |")
    print(f"\n{len(refused_rows)} replays in {time.perf_counter() - started:.0f} s "
          f"({time.process_time() - cpu:.0f} s of CPU)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace-dir", type=Path,
                        default=Path("../shared/traces/alibaba-gpu-v2023"))
    parser.add_argument("--hosts", type=int, nargs="+", default=[3, 4, 5, 6])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--loads", type=float, nargs="+", default=[0.8, 1.0, 1.2])
    parser.add_argument("--synthetic-hosts", type=int, default=4)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--replay", action="store_true")
    parser.add_argument("--replay-fleets", nargs="+", default=["1:1", "1:2", "2:2"],
                        metavar="H100:A100")
    parser.add_argument("--replay-sizing", nargs="+", default=["peak", "mean"],
                        choices=("peak", "mean"))
    args = parser.parse_args()
    if args.replay:
        replay_main(args)
        return

    pods = alibaba_requests(args.trace_dir / POD_LIST)
    header = ("| fleet | requests | " + " | ".join(POLICIES)
              + " | slot-aware vs whole-gpu |\n|---|---|" + "---|" * (len(POLICIES) + 1))
    print(f"trace: {POD_LIST}, {len(pods)} GPU pods, departures as recorded")
    print(header)
    for hosts in args.hosts:
        counts = {p: [replay(pods, MigFleet(hosts, GPUS_PER_HOST), p).accepted]
                  for p in POLICIES}
        print(_row(f"{hosts} x {GPUS_PER_HOST} GPUs", counts, len(pods)))

    gpus = args.synthetic_hosts * GPUS_PER_HOST
    print(f"\nsynthetic: {args.requests} requests a seed, seeds 0-{args.seeds - 1}, "
          f"{args.synthetic_hosts} x {GPUS_PER_HOST} GPUs")
    print(header.replace("| fleet |", "| offered load |"))
    for load in args.loads:
        counts: dict[str, list[int]] = {p: [] for p in POLICIES}
        for seed in range(args.seeds):
            stream = synthetic_requests(pods, args.requests, gpus, load, seed)
            for policy in POLICIES:
                counts[policy].append(
                    replay(stream, MigFleet(args.synthetic_hosts, GPUS_PER_HOST),
                           policy).accepted)
        print(_row(f"{load:.1f}", counts, args.requests))


if __name__ == "__main__":
    main()
