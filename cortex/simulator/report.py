"""The simulator's report: tables, plots and the machine-readable summary.

A Markdown table per fleet, a PNG plot of the runs over the trace, and the summary over
seeds (:func:`summary`, ``cortex-manage simulate --format json``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cortex.simulator.replay import RunResult

WINDOW = 50  # arrivals in the plot's rolling means

COLUMNS = ("pipeline", "requests", "placed", "GPUs (vGPUs) placed",
           "first rejection (placed before)",
           "first GPU / vGPU rejection",
           "multi-GPU", "all NVLink", "all NVLink where possible",
           "all NVLink where the fleet has such a set", "NUMA-local",
           "frag. 4-GPU (mean)", "frag. 8-GPU (mean)", "decision ms p50 / p95")


def _percent(value: float | None) -> str:
    """``97.5 %`` or ``n/a``."""
    return "n/a" if value is None else f"{100 * value:.1f} %"


def _arrival(number: int | None) -> str:
    """``#12`` or ``none``."""
    return "none" if number is None else f"#{number}"


def table(runs: Sequence[RunResult]) -> str:
    """A Markdown table, one row per run (see :data:`COLUMNS`)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for run in runs:
        first = run.first_rejection
        cells = (
            f"`{run.pipeline}`", str(len(run.decisions)), str(run.placed),
            f"{run.gpus_placed('gpus')} ({run.gpus_placed('vgpus')})",
            "none" if first is None else f"#{first} ({run.placed_before_first_rejection})",
            " / ".join(_arrival(run.first_rejection_of(k)) for k in ("gpu", "vgpu")),
            str(run.multi_gpu), _percent(run.nvlink_share),
            _percent(run.nvlink_possible_share), _percent(run.nvlink_fleet_share),
            _percent(run.numa_local_share),
            f"{run.mean('frag4'):.1f}", f"{run.mean('frag8'):.1f}",
            f"{run.decision_ms(0.5):.1f} / {run.decision_ms(0.95):.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


#: Arrived workload levels (% of the fleet's passthrough GPUs) of :func:`summary`.
ARRIVED_LEVELS = (50, 100, 120)


def interval(values: Sequence[float]) -> dict[str, Any]:
    """``{"mean", "ci95"}`` of ``values``: Student's t interval over them (None for one).

    The two-sided 95 % interval of the mean, ``mean +- t(0.975, n - 1) * s / sqrt(n)``
    (``scipy.stats.t``); the values are taken as independent draws, one per seed.
    """
    mean = statistics.fmean(values)
    if len(values) < 2:
        return {"mean": mean, "ci95": None}
    from scipy.stats import t

    half = t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return {"mean": mean, "ci95": [mean - half, mean + half]}


def summary(by_seed: Sequence[Sequence[RunResult]]) -> dict[str, Any]:
    """The machine-readable results of one scenario: per pipeline, over the seeds.

    ``by_seed``: per seed, one run per pipeline, the subject first (the session's
    ``FleetRuns.by_seed``). Per pipeline: ``placed_before_first_rejection``
    (:func:`interval`), ``unallocated_gpu_pct_at`` (Weng et al.'s measure at 50, 100
    and 120 % arrived, the mean over the seeds that got there, else None),
    ``nvlink_complete_pct`` (multi-GPU placements all on NVLink where the fleet had such
    a set), ``nvlink_fleet_pct`` (the same among multi-GPU placements whose accepted
    models have such a set on some host of the fleet, busy or not:
    :attr:`RunResult.nvlink_fleet_share`), ``nvlink_all_pct``, ``numa_local_pct``,
    ``gpus_placed``,
    ``mispredicted_pct`` (GPU placements whose devices the weighers' model did not
    predict: only with a shuffled device order); the subject also
    ``paired_vs``: per other pipeline the per-seed difference of requests placed before
    the first rejection, in % of the other's, as :func:`interval` (``mean_diff_pct``,
    ``ci95``).
    """
    pipelines = [run.pipeline for run in by_seed[0]]
    found: dict[str, Any] = {}
    for index, name in enumerate(pipelines):
        runs = [seed[index] for seed in by_seed]
        found[name] = {
            "seeds": len(runs),
            "placed_before_first_rejection": interval(
                [float(r.placed_before_first_rejection) for r in runs]),
            "unallocated_gpu_pct_at": {
                str(level): _mean([r.unallocated_pct_at(level) for r in runs])
                for level in ARRIVED_LEVELS},
            "nvlink_complete_pct": _mean([_pct(r.nvlink_possible_share) for r in runs]),
            "nvlink_fleet_pct": _mean([_pct(r.nvlink_fleet_share) for r in runs]),
            "nvlink_all_pct": _mean([_pct(r.nvlink_share) for r in runs]),
            "numa_local_pct": _mean([_pct(r.numa_local_share) for r in runs]),
            "mispredicted_pct": _mean([_pct(r.misprediction_share) for r in runs]),
            "gpus_placed": statistics.fmean(r.gpus_placed("gpus") for r in runs)}
    subject = pipelines[0]
    found[subject]["paired_vs"] = {}
    for index, other in enumerate(pipelines[1:], start=1):
        diffs = [100 * (seed[0].placed_before_first_rejection
                        - seed[index].placed_before_first_rejection)
                 / max(1, seed[index].placed_before_first_rejection) for seed in by_seed]
        paired = interval(diffs)
        found[subject]["paired_vs"][other] = {"mean_diff_pct": paired["mean"],
                                              "ci95": paired["ci95"]}
    return found


def _pct(share: float | None) -> float | None:
    return None if share is None else 100 * share


def _mean(values: Sequence[float | None]) -> float | None:
    """The mean of the values that are not None (None when none is)."""
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def rolling(values: Sequence[float], window: int | None = None) -> list[float]:
    """The mean of each value and the ``window - 1`` before it (fewer at the start)."""
    window = window or WINDOW
    means, total = [], 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        means.append(total / min(i + 1, window))
    return means


#: Arrived workload (% of the fleet's passthrough GPUs) on the plot's unallocated-GPU panel.
ARRIVED_AXIS = tuple(range(0, 151, 5))


def spread(series: Sequence[Sequence[float | None]]) -> list[tuple[float, float, float]]:
    """Per position: ``(lowest, median, highest)`` over the seeds' series.

    ``series``: one sequence per seed; a shorter one, a None or a NaN counts as missing
    there. NaN for all three where every seed is missing.
    """
    found = []
    for i in range(max((len(s) for s in series), default=0)):
        values = sorted(v for s in series if i < len(s) and (v := s[i]) is not None
                        and not math.isnan(v))
        if values:
            found.append((values[0], statistics.median(values), values[-1]))
        else:
            found.append((math.nan, math.nan, math.nan))
    return found


def _curves(run: RunResult) -> dict[str, list[float | None]]:
    """The per-arrival series a run is plotted by (see :func:`plot`)."""
    rejected, nvlink, multi = 0, 0, 0
    cumulative: list[float | None] = []
    shares: list[float | None] = []
    for d in run.decisions:
        rejected += d.host is None
        cumulative.append(rejected)
        if d.host and d.gpus >= 2:
            multi += 1
            nvlink += bool(d.nvlink)
        shares.append(100 * nvlink / multi if multi else None)
    return {"rejected": cumulative, "nvlink": shares,
            "frag8": list(rolling([d.frag8 for d in run.decisions])),
            "unallocated": run.unallocated_curve(ARRIVED_AXIS)}


def plot(by_seed: Sequence[Sequence[RunResult]], path: str | Path, title: str) -> Path:
    """Write a PNG of the pipelines' runs over every seed; its path.

    ``by_seed``: per seed, one run per pipeline in the same order (``FleetRuns.by_seed``;
    one seed is ``[runs]``). Six panels, each pipeline in its own colour, the line the
    median over the seeds and the band their lowest to highest: requests rejected so
    far, free GPUs that cannot serve an 8-GPU request (rolling mean of :data:`WINDOW`
    arrivals), the NVLink share of multi-GPU placements so far, Weng et al.'s
    unallocated GPUs (% of the passthrough GPUs) against the workload arrived (% of
    them, 0 to 150; a trace with departures frees GPUs as it goes, so read it on
    ``fill`` runs), the requests placed before the first rejection of each seed (a
    dot per seed, a bar at the mean), and the decision times of all seeds.

    Needs matplotlib (the ``simulate`` extra); uses the Agg backend (no display).
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(2, 3, figsize=(17, 9))
    flat = [a for row in axes for a in row]
    pipelines = [run.pipeline for run in by_seed[0]]
    for index, name in enumerate(pipelines):
        runs = [seed[index] for seed in by_seed]
        curves = [_curves(run) for run in runs]
        colour = f"C{index}"
        for axis, key in ((flat[0], "rejected"), (flat[1], "frag8"), (flat[2], "nvlink")):
            _band(axis, None, spread([c[key] for c in curves]), colour, name)
        _band(flat[3], ARRIVED_AXIS, spread([c["unallocated"] for c in curves]), colour, name)
        counts = [run.placed_before_first_rejection for run in runs]
        flat[4].scatter([index] * len(counts), counts, color=colour, alpha=0.6, s=18,
                        label=name)
        flat[4].hlines(statistics.fmean(counts), index - 0.3, index + 0.3, color=colour)
        times = sorted(d.decision_ms for run in runs for d in run.decisions)
        flat[5].plot(times, [100 * (i + 1) / len(times) for i in range(len(times))],
                     color=colour, label=name)
    flat[4].set_xticks(range(len(pipelines)), pipelines, fontsize=7)
    flat[4].set_xlim(-0.6, len(pipelines) - 0.4)
    flat[5].set_xscale("log")
    seeds = f"{len(by_seed)} seed{'s' if len(by_seed) > 1 else ''}"
    labels = (("requests rejected (cumulative)", "arrival"),
              (f"free GPUs that cannot serve an 8-GPU request (mean of {WINDOW})", "arrival"),
              ("multi-GPU placements all NVLink (cumulative %)", "arrival"),
              ("unallocated GPUs (%, Weng et al.)", "workload arrived (% of the GPUs)"),
              (f"placed before the first rejection ({seeds})", ""),
              ("decisions (%) at or under", "decision time (ms)"))
    for axis, (ylabel, xlabel) in zip(flat, labels, strict=True):
        axis.set_title(ylabel, fontsize=10)
        axis.set_xlabel(xlabel)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    figure.suptitle(f"{title}\nline: median over {seeds}; band: lowest to highest")
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)
    pyplot.close(figure)
    return path


def _band(axis: Any, x: Sequence[float] | None, points: Sequence[tuple[float, float, float]],
          colour: str, label: str) -> None:
    """The median line and the lowest-to-highest band of :func:`spread`'s ``points``."""
    xs = list(x) if x is not None else list(range(1, len(points) + 1))
    low, middle, high = ([p[i] for p in points] for i in range(3))
    axis.plot(xs, middle, color=colour, label=label)
    axis.fill_between(xs, low, high, color=colour, alpha=0.2, linewidth=0)
