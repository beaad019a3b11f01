"""What HiveD's cell preservation buys: kvm-gpu-topology-aware with and without it.

Run: .venv/bin/python bench/cell_preserving.py [--seeds 10]

Compares the shipped ``kvm-gpu-cell-preserving`` (``kvm-gpu-topology-aware`` with
``weigher_gpu_cell_preserving`` at multiplier 3: cells of NVLink-joined GPUs) with a
variant written to a temporary pipelines file, ``+cells-any-link`` (``level:
cross_socket``: every GPU of a host one cell, NVLink or not). Replays the shipped
``mixed`` and ``hgx`` fleets with ``cortex-manage simulate`` (synthetic timelines,
2,000 requests, load 0.8, ``--seeds`` seeds) against the unchanged pipeline and
``kvm-gpu-bin-packing``, and prints per fleet and pipeline the requests placed before
the first rejection (mean, 95 % interval), the cell-preserving pipeline's paired
difference from each other pipeline, the NVLink-complete and NUMA-local shares and the GPUs placed.
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
BASE = "kvm-gpu-topology-aware"
CELLS = "kvm-gpu-cell-preserving"


def derived_pipelines() -> dict:
    """The shipped pipelines file with ``+cells-any-link`` added."""
    document = yaml.safe_load((REPO / "etc/cortex/pipelines.yaml").read_text())
    pipelines = document["pipelines"]
    pipeline = copy.deepcopy(pipelines[CELLS])
    pipeline["description"] = f"{CELLS} with cells of any link (level cross_socket)"
    for step in pipeline["weighers"]:
        if step["name"] == "weigher_gpu_cell_preserving":
            step["options"] = {"level": "cross_socket"}
    pipelines["+cells-any-link"] = pipeline
    return document


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "pipelines.yaml"
        path.write_text(yaml.safe_dump(derived_pipelines(), sort_keys=False))
        command = [sys.executable, "-m", "cortex.cmd.manage", "simulate", "--fleet", "mixed",
                   "--fleet", "hgx", "--trace", "synthetic", "--requests", "2000", "--load",
                   "0.8", "--seeds", str(args.seeds), "--pipeline", CELLS, "--compare",
                   BASE, "--compare", "+cells-any-link", "--compare",
                   "kvm-gpu-bin-packing", "--pipelines-file", str(path), "--format", "json"]
        result = json.loads(subprocess.run(command, cwd=REPO, check=True, capture_output=True,
                                           text=True).stdout)
    print(f"{args.seeds} seeds\n")
    print(f"| fleet | pipeline | placed before 1st rejection | 95 % interval | `{CELLS}` paired "
          "against it | NVLink-complete | NUMA-local | GPUs placed |")
    print("|---|---|---|---|---|---|---|---|")
    for scenario in result["scenarios"]:
        pipelines = scenario["pipelines"]
        paired = pipelines[CELLS].get("paired_vs", {})
        for name, measured in pipelines.items():
            placed = measured["placed_before_first_rejection"]
            low, high = placed["ci95"]
            versus = "" if name not in paired else "{:+.1f} % [{:+.1f}, {:+.1f}]".format(
                paired[name]["mean_diff_pct"], *paired[name]["ci95"])
            print(f"| {scenario['fleet']} | `{name}` | {placed['mean']:.1f} | "
                  f"[{low:.0f}, {high:.0f}] | {versus} | {measured['nvlink_complete_pct']:.1f} % "
                  f"| {measured['numa_local_pct']:.1f} % | {measured['gpus_placed']:.0f} |")


if __name__ == "__main__":
    main()
