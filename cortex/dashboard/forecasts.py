"""The foresight page's charts: GPU demand ahead and the GPUs in use against the supply.

Drawn as SVG on the server from a stored forecast document
(:func:`cortex.services.forecasts.stored`).
"""

from __future__ import annotations

from typing import Any

from cortex.dashboard.units import nice_ceiling

#: Forecast charts drawn at most (the soonest exhaustions first).
MAX_CHARTS = 24
_W, _H = 460, 170
_LEFT, _TOP, _RIGHT, _BOTTOM = 40, 12, 10, 22


def _scale(low: float, high: float, span: float, offset: float, flip: bool = False):
    """A function mapping ``[low, high]`` onto ``span`` pixels from ``offset``."""
    width = (high - low) or 1.0

    def place(value: float) -> float:
        share = (value - low) / width
        return round(offset + (1 - share if flip else share) * span, 1)
    return place


def _points(xs: list[float], ys: list[float], x, y) -> str:
    """An SVG polyline's ``points`` attribute."""
    return " ".join(f"{x(a)},{y(b)}" for a, b in zip(xs, ys, strict=True))


def forecast_chart(document: dict[str, Any]) -> dict[str, Any]:
    """The SVG geometry of one forecast document (with its series).

    Two plots of ``_W`` x ``_H`` pixels sharing the time axis (hours from the first hour
    shown; 0 is now): ``demand`` (history and forecast polylines, the interval as a
    polygon) and ``in_use`` (projection and its pessimistic bound against the supply,
    the exhaustion marked; None for a flavor family's forecast, of demand alone).
    Returns ``{"demand": {...}, "in_use": {...}, "days": [...]}`` with ``points``
    strings, tick labels and the now line's x.
    """
    history, points = document.get("history") or [], document.get("points") or []
    past = list(range(-len(history), 0))
    ahead = list(range(len(points)))
    hours = past + ahead
    first, last = (hours[0], hours[-1]) if hours else (0, 1)
    x = _scale(first, max(last, first + 1), _W - _LEFT - _RIGHT, _LEFT)
    days = [{"x": x(h), "label": f"{h // 24:+d} d" if h else "now"}
            for h in range(first - first % 24, last + 1, 24 * max(1, (last - first) // 24 // 6))
            if first <= h <= last]

    def plot(top: float, curves: dict[str, list[float]], extra: float = 0) -> tuple:
        high = nice_ceiling(int(max([extra, 1.0, *(v for c in curves.values()
                                                        for v in c)]) + 0.999))
        y = _scale(0, high, _H - _TOP - _BOTTOM, _TOP, flip=True)
        ticks = [{"y": y(v), "label": str(v)} for v in (0, high // 2, high)]
        return y, ticks, high

    asked = [p["gpus"] for p in history]
    mean = [p["gpus"] for p in points]
    lower, upper = [p["lower"] for p in points], [p["upper"] for p in points]
    y, ticks, _ = plot(_TOP, {"asked": asked, "upper": upper})
    band = (_points(ahead, upper, x, y) + " " + _points(ahead[::-1], lower[::-1], x, y)
            if points else "")
    demand = {"history": _points(past, asked, x, y), "mean": _points(ahead, mean, x, y),
              "band": band, "yticks": ticks}
    supply = document["supply_gpus"]
    base = {"width": _W, "height": _H, "left": _LEFT, "right": _W - _RIGHT,
            "bottom": _H - _BOTTOM, "top": _TOP, "now_x": x(0), "days": days,
            "demand": demand, "in_use": None}
    if supply is None:  # a flavor family: demand alone
        return base
    in_use = [p["in_use"] for p in points]
    worst = [p["in_use_pessimistic"] for p in points]
    y2, ticks2, _ = plot(_TOP, {"in_use": in_use, "worst": worst}, extra=supply)
    runs_out = document.get("days_to_exhaustion")
    use = {"in_use": _points(ahead, in_use, x, y2), "worst": _points(ahead, worst, x, y2),
           "supply_y": y2(supply), "yticks": ticks2,
           "now_used": y2(document["used_gpus"]),
           "exhaustion_x": x(min(runs_out * 24, last)) if runs_out is not None else None}
    return base | {"in_use": use}


def soonest(document: dict[str, Any]) -> tuple:
    """Sort key: exhaustion soonest first (never last), then model and zone.

    A flavor family's exhaustion is that of its soonest flavor against its placeable
    supply (``placeable_days_to_exhaustion``).
    """
    days = document.get("days_to_exhaustion")
    if document.get("flavor_family") is not None:
        days = document.get("placeable_days_to_exhaustion")
    early = document.get("days_to_exhaustion_pessimistic")
    return (days is None, days or 0.0, early is None, early or 0.0, document["model"],
            document["availability_zone"] or "")
