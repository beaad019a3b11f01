"""The simulator's report: a Markdown table per fleet and a PNG plot of the runs over the trace."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from cortex.simulator.replay import RunResult

WINDOW = 50  # arrivals in the plot's rolling means

COLUMNS = ("pipeline", "requests", "placed", "GPUs (vGPUs) placed",
           "first rejection (placed before)",
           "first GPU / vGPU rejection",
           "multi-GPU", "all NVLink", "all NVLink where possible", "NUMA-local",
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
            _percent(run.nvlink_possible_share), _percent(run.numa_local_share),
            f"{run.mean('frag4'):.1f}", f"{run.mean('frag8'):.1f}",
            f"{run.decision_ms(0.5):.1f} / {run.decision_ms(0.95):.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


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


def plot(runs: Sequence[RunResult], path: str | Path, title: str) -> Path:
    """Write a PNG of the runs over the trace: rejections, fragmentation, NVLink, decision time.

    Needs matplotlib (the ``simulate`` extra); uses the Agg backend (no display).
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(2, 2, figsize=(12, 8))
    for run in runs:
        x = [d.index + 1 for d in run.decisions]
        rejected, nvlink, multi, shares = 0, 0, 0, []
        cumulative = []
        for d in run.decisions:
            rejected += d.host is None
            cumulative.append(rejected)
            if d.host and d.gpus >= 2:
                multi += 1
                nvlink += bool(d.nvlink)
            shares.append(100 * nvlink / multi if multi else float("nan"))
        line = axes[0][0].plot(x, cumulative, label=run.pipeline)[0]
        axes[0][1].plot(x, rolling([d.frag4 for d in run.decisions]), color=line.get_color(),
                        label=f"{run.pipeline}: < 4 free")
        axes[0][1].plot(x, rolling([d.frag8 for d in run.decisions]), color=line.get_color(),
                        linestyle="--", label=f"{run.pipeline}: < 8 free")
        axes[1][0].plot(x, shares, color=line.get_color(), label=run.pipeline)
        times = sorted(d.decision_ms for d in run.decisions)
        axes[1][1].plot(times, [100 * (i + 1) / len(times) for i in range(len(times))],
                        color=line.get_color(), label=run.pipeline)
    axes[1][1].set_xscale("log")
    labels = (("requests rejected (cumulative)", "arrival"),
              (f"free GPUs that cannot serve a 4-/8-GPU request (mean of {WINDOW})", "arrival"),
              ("multi-GPU placements all NVLink (cumulative %)", "arrival"),
              ("decisions (%) at or under", "decision time (ms)"))
    for axis, (ylabel, xlabel) in zip((a for row in axes for a in row), labels, strict=True):
        axis.set_title(ylabel, fontsize=10)
        axis.set_xlabel(xlabel)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    figure.suptitle(title)
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)
    pyplot.close(figure)
    return path
