"""The scheduling timeline drawn: stacked bars per (service, pipeline), refusals marked.

Over :func:`cortex.store.timeline.decision_timeline`'s counts (grouped in SQL, read
through :func:`cortex.services.history.decision_timeline`).
"""

from __future__ import annotations

from typing import Any

from cortex.dashboard.units import nice_ceiling
from cortex.store.timeline import Timeline

#: (service, pipeline) series drawn with a colour of their own; the rest are "other".
MAX_SERIES = 8
_CHART_W, _CHART_H = 960, 260
_LEFT, _TOP_MARGIN, _RIGHT, _BOTTOM = 48, 18, 12, 30
#: Outcomes stacked in their series' colour, and the marked ones, bottom to top.
_COUNTED, _MARKED = ("ok", "simulated"), ("rejected", "error")
_MARK_LABELS = {"rejected": "refused (4xx)", "error": "error (503)"}
#: Seconds between two labelled times of the x axis: the first giving at most 8 labels.
_TICKS = (300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800)


def _series_name(service: str, pipeline: str | None) -> str:
    """``nova · kvm-gpu-topology-aware`` (``(no pipeline)`` for calls refused before one)."""
    return f"{service} · {pipeline or '(no pipeline)'}"


def timeline_totals(counted: Timeline) -> list[dict[str, Any]]:
    """Decisions in the window per (service, pipeline), the most first.

    Each ``{service, pipeline, name, ok, simulated, rejected, error, total}``: counts.
    """
    rows: dict[tuple[str, str | None], dict[str, Any]] = {}
    for (service, pipeline, outcome), counts in counted.counts.items():
        row = rows.setdefault((service, pipeline), {
            "service": service, "pipeline": pipeline, "name": _series_name(service, pipeline),
            "ok": 0, "simulated": 0, "rejected": 0, "error": 0, "total": 0})
        row[outcome] = row.get(outcome, 0) + sum(counts)
        row["total"] += sum(counts)
    return sorted(rows.values(), key=lambda r: (-r["total"], r["name"]))


def timeline_chart(counted: Timeline) -> dict[str, Any]:
    """The timeline as stacked bars: coordinates for the SVG the template draws.

    Per bucket, bottom to top: one bar segment per (service, pipeline) series counting
    its ``ok`` and ``simulated`` decisions (the :data:`MAX_SERIES` busiest series in
    colours ``s0``.., the rest as ``other``), then the bucket's refusals (``rejected``,
    4xx, hatched orange) and errors (``error``, 503, red) of all series, each also
    flagged by a triangle above the bar. Returns ``{width, height, plot: {x, y, w, h},
    series: [{name, css, total}], bars: [{x, y, w, h, css}], marks: [{path, css,
    title}], hovers: [{x, w, title}], yticks: [{y, label}], xticks: [{x, label}],
    peak, empty}`` in SVG user units (pixels at 100 %); only non-empty segments.
    """
    n = counted.buckets
    stacks, marked, lines = _stacks(counted)
    heights = [sum(s["values"][i] for s in stacks) for i in range(n)]
    peak = nice_ceiling(max(heights, default=0))
    plot = {"x": _LEFT, "y": _TOP_MARGIN, "w": _CHART_W - _LEFT - _RIGHT,
            "h": _CHART_H - _TOP_MARGIN - _BOTTOM}
    slot = plot["w"] / n
    gap = slot * 0.15 if slot >= 4 else 0.0
    bottom = plot["y"] + plot["h"]
    bars, marks, hovers = [], [], []
    for i in range(n):
        x, y = plot["x"] + i * slot, float(bottom)
        for stack in stacks:
            count = stack["values"][i]
            if count:
                height = count / peak * plot["h"]
                y -= height
                bars.append({"x": x + gap / 2, "y": y, "w": slot - gap, "h": height,
                             "css": stack["css"]})
        centre = x + slot / 2
        for outcome in _MARKED:
            if marked[outcome][i]:
                y -= 9
                marks.append({"path": f"M {centre - 4:.1f} {y:.1f} h 8 l -4 7 z", "css": outcome,
                              "title": f"{_bucket_label(counted, i)}: {marked[outcome][i]} "
                                       f"{_MARK_LABELS[outcome]}"})
        if heights[i]:
            detail = "\n".join(sorted(lines[i])[:12]) + ("\n…" if len(lines[i]) > 12 else "")
            hovers.append({"x": x, "w": slot, "title": f"{_bucket_label(counted, i)}: "
                                                        f"{heights[i]} decisions\n{detail}"})
    ticks = {0, peak} | ({peak // 2} if peak % 2 == 0 else set())
    yticks = [{"y": bottom - v / peak * plot["h"], "label": str(v)} for v in sorted(ticks)]
    xticks = _xticks(counted, plot["x"], slot)
    return {"width": _CHART_W, "height": _CHART_H, "plot": plot, "bottom": bottom,
            "series": [{"name": s["name"], "css": s["css"], "total": sum(s["values"])}
                       for s in stacks],
            "bars": bars, "marks": marks, "hovers": hovers, "yticks": yticks,
            "xticks": xticks, "peak": peak, "empty": not any(heights)}


def _stacks(counted: Timeline) -> tuple[list[dict[str, Any]], dict[str, list[int]],
                                         list[list[str]]]:
    """The bars' stacks bottom to top, the marked outcomes' counts, each bucket's lines.

    Stacks: the :data:`MAX_SERIES` busiest (service, pipeline) series (``ok`` and
    ``simulated``), the rest as ``other``, then the marked outcomes; each ``{name, css,
    values}`` with one count per bucket. Lines: ``"series: count outcome"`` per bucket.
    """
    n = counted.buckets
    per_series: dict[tuple[str, str | None], list[int]] = {}
    marked = {outcome: [0] * n for outcome in _MARKED}
    lines: list[list[str]] = [[] for _ in range(n)]
    for (service, pipeline, outcome), counts in counted.counts.items():
        if outcome in _MARKED:
            target = marked[outcome]
        else:
            target = per_series.setdefault((service, pipeline), [0] * n)
        for i, count in enumerate(counts):
            if count:
                target[i] += count
                lines[i].append(f"{_series_name(service, pipeline)}: {count} {outcome}")
    ranked = sorted(per_series.items(), key=lambda kv: (-sum(kv[1]), _series_name(*kv[0])))
    series = [{"name": _series_name(*key), "css": f"s{i}", "values": values}
              for i, (key, values) in enumerate(ranked[:MAX_SERIES])]
    if ranked[MAX_SERIES:]:
        series.append({"name": f"other ({len(ranked) - MAX_SERIES} series)", "css": "other",
                       "values": [sum(v[i] for _, v in ranked[MAX_SERIES:]) for i in range(n)]})
    stacks = series + [{"name": _MARK_LABELS[o], "css": o, "values": marked[o]}
                       for o in _MARKED]
    return stacks, marked, lines


def _xticks(counted: Timeline, left: float, slot: float) -> list[dict[str, Any]]:
    """The labelled times of the x axis: the first spacing of :data:`_TICKS` giving 8 at most."""
    n = counted.buckets
    fmt = "%H:%M" if counted.step * n <= 86400 else "%d %b %H:%M"
    every = next((t for t in _TICKS if t % counted.step == 0 and counted.step * n / t <= 8),
                 _TICKS[-1])
    first = int(counted.start.timestamp())
    return [{"x": left + i * slot, "label": counted.bucket_start(i).strftime(fmt)}
            for i in range(n) if (first + i * counted.step) % every == 0]


def _bucket_label(counted: Timeline, index: int) -> str:
    """``11:42–11:43 UTC`` (with the day when the window is longer than one)."""
    start, end = counted.bucket_start(index), counted.bucket_start(index + 1)
    fmt = "%H:%M" if counted.step * counted.buckets <= 86400 else "%d %b %H:%M"
    return f"{start.strftime(fmt)}–{end.strftime(fmt)} UTC"
