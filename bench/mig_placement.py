"""MIG placement: slot-aware against first-fit slots and whole-GPU allocation of the same requests.

Run: .venv/bin/python bench/mig_placement.py [--trace-dir ../shared/traces/alibaba-gpu-v2023]
     [--hosts 3 4 5 6] [--seeds 5] [--loads 0.8 1.0 1.2] [--synthetic-hosts 4]

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
"""

import argparse
import statistics
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace-dir", type=Path,
                        default=Path("../shared/traces/alibaba-gpu-v2023"))
    parser.add_argument("--hosts", type=int, nargs="+", default=[3, 4, 5, 6])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--loads", type=float, nargs="+", default=[0.8, 1.0, 1.2])
    parser.add_argument("--synthetic-hosts", type=int, default=4)
    parser.add_argument("--requests", type=int, default=3000)
    args = parser.parse_args()

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
