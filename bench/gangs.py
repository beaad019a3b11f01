"""Gangs with and without all or nothing, over seeds (cortex/simulator/gangs.py).

``python bench/gangs.py --seeds 10``: the leaf/spine fleet
(``etc/cortex/simulator/fleet-leafspine.yaml``: 64 HGX H100 boards), ``--jobs`` jobs of
4, 8 or 16 whole-board members at ``--load`` offered GPU load, each replayed member by
member and all or nothing through ``kvm-gpu-topology-aware``; a Markdown table of the
mean and 95 % interval over the seeds.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cortex import conf  # noqa: E402
from cortex.pipeline.config import load_pipelines  # noqa: E402
from cortex.simulator.fleet import read_fleet  # noqa: E402
from cortex.simulator.gangs import GangSpec, gang_trace, replay_gangs, table  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=60)
    parser.add_argument("--load", type=float, default=0.9)
    parser.add_argument("--pipeline", default="kvm-gpu-topology-aware")
    args = parser.parse_args()
    fleet = read_fleet(REPO / "etc/cortex/simulator/fleet-leafspine.yaml")
    pipelines = load_pipelines(conf.shipped_file("pipelines.yaml"))
    runs: dict[bool, list] = {False: [], True: []}
    started = time.perf_counter()
    for seed in range(1, args.seeds + 1):
        spec = GangSpec(jobs=args.jobs, load=args.load, seed=seed)
        jobs = gang_trace(fleet, spec)
        for mode in (False, True):
            runs[mode].append(replay_gangs(fleet, jobs, pipelines, args.pipeline, spec, mode,
                                           seed))
    print(f"# {datetime.now(UTC):%Y-%m-%d}: {args.seeds} seeds, {args.jobs} jobs of 4/8/16 "
          f"8-GPU members, load {args.load}, {fleet.name} ({len(fleet.hosts)} hosts), "
          f"{args.pipeline}; {time.perf_counter() - started:.0f} s")
    print(table(runs, args.jobs))


if __name__ == "__main__":
    main()
