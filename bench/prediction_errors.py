"""What Cortex's device prediction is worth, and what its errors cost.

Run: .venv/bin/python bench/prediction_errors.py [--seeds 5] [--requests 2000]

The weighers score the GPUs nova-compute is predicted to hand out
(:func:`cortex.rules.device_choice.predict_claim`, which matches Nova 34's own claim on
every generated case of tests/differential/test_nova_claims.py). Here each simulated
nova-compute's PCI tracker lists its devices either in PCI address order (the model's
assumption) or in a seeded shuffled order per host (a tracker the model does not know:
the claims then differ from the prediction where the host had a choice). Per shipped
fleet and pipeline, over synthetic timelines (offered GPU load 0.8): the share of GPU
placements whose devices were not the predicted ones, the NVLink-complete share where
the fleet had such a set, NUMA-local share and requests placed before the first
rejection, for both orders, as ``cortex-manage simulate --device-order`` computes them.
"""

import argparse
import time

from cortex.simulator.report import summary
from cortex.simulator.session import SimulationSpec, simulate
from cortex.simulator.trace import SyntheticSpec

PIPELINES = ("kvm-gpu-topology-aware", "kvm-gpu-bin-packing")


def main() -> None:
    """Print one Markdown row per fleet, pipeline and device order."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    started = time.perf_counter()
    print("| fleet | pipeline | device order | mispredicted GPU placements | NVLink-complete "
          "| NUMA-local | placed before 1st rejection |")
    print("|---|---|---|---|---|---|---|")
    for fleet in ("mixed", "hgx"):
        for order in ("pci", "shuffled"):
            spec = SimulationSpec(fleets=[fleet], trace="synthetic", pipelines=PIPELINES,
                                  seeds=args.seeds, device_order=order,
                                  synthetic=SyntheticSpec(requests=args.requests, load=0.8))
            result, = simulate(spec)
            found = summary(result.by_seed)
            if not all(run.gpus_placed("gpus") for runs in result.by_seed for run in runs):
                raise SystemExit(f"{fleet}: a replay placed no GPU: nothing to measure")
            for pipeline in PIPELINES:
                row = found[pipeline]
                placed = row["placed_before_first_rejection"]
                print(f"| {fleet} | `{pipeline}` | {order} | {row['mispredicted_pct']:.1f} % "
                      f"| {row['nvlink_complete_pct']:.1f} % | {row['numa_local_pct']:.1f} % "
                      f"| {placed['mean']:.0f} |")
    print(f"\n{args.seeds} seeds, {args.requests} requests each, "
          f"{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
