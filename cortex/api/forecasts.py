"""``GET /v1/forecasts`` and the forecast metrics: what cortex-sync last computed.

The API computes nothing here: the forecasts are fitted by cortex-sync's ``forecast``
source (or ``cortex-manage forecast --store``) and kept in ``gpu_forecasts``
(:class:`cortex.store.demand.ForecastStore`, read through :mod:`cortex.services.forecasts`);
this module serves them as JSON and as Prometheus gauges for alerting
(``etc/cortex/prometheus-alerts.yaml``).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

from flask import current_app, jsonify, request
from prometheus_client.core import GaugeMetricFamily, Metric

from cortex.api.body import query_flag
from cortex.api.errors import ApiError
from cortex.services import forecasts
from cortex.services.capacity import flavor_supply
from cortex.services.errors import DatabaseUnreachable

LOG = logging.getLogger(__name__)
def list_forecasts():
    """``GET /v1/forecasts?model=&flavor_family=&availability_zone=&series=``.

    Answers ``{"forecasts": [document...]}`` (see
    :func:`cortex.forecast.plan.forecast_documents`): GPU models, then flavor families,
    by zone; without the hourly ``history`` and ``points`` unless ``series=true``.
    ``availability_zone=`` empty selects the all-zone forecasts, ``flavor_family=``
    empty the models'. A flavor family's document carries its flavors' days to
    exhaustion against their placeable supply
    (:func:`cortex.services.forecasts.with_placeable`: ``placeable``,
    ``placeable_days_to_exhaustion``, ``placeable_flavor``; None until the placeable
    counts are first computed, in the background). 400 for a bad ``series``, 503 when
    the database cannot be read. An empty list when nothing was computed yet.
    """
    raw = request.args.get("series", "").strip()
    series = query_flag("series", raw) if raw else False
    model, family = request.args.get("model"), request.args.get("flavor_family")
    zone = request.args.get("availability_zone")
    try:
        documents = forecasts.select(
            current_app.extensions["cortex"].engine,
            model=forecasts.ANY if model is None else model,
            family=forecasts.ANY if family is None else family or None,
            zone=forecasts.ANY if zone is None else zone or None, series=series,
            supply=flavor_supply(current_app.extensions))
    except DatabaseUnreachable as exc:
        raise ApiError(503, f"database unreachable: {exc}") from None
    return jsonify(forecasts=documents)


class ForecastCollector:
    """Scrape-time gauges of the stored forecasts, read at most every ``refresh`` seconds.

    - ``cortex_gpu_days_to_exhaustion{model,availability_zone}``: days until the GPUs in
      use are projected to reach the supply (+Inf: not within the horizon; the zone
      label is empty for a model over all zones);
    - ``cortex_gpu_days_to_exhaustion_pessimistic{...}``: the same at the lower end of
      the forecast's interval;
    - ``cortex_gpu_forecast_supply_gpus{...}`` and ``cortex_gpu_forecast_used_gpus{...}``;
    - ``cortex_gpu_forecast_timestamp_seconds``: when the forecasts were computed (an
      alert on its age finds a forecast source that stopped).

    ``read``: :func:`cortex.services.forecasts.stored` of the engine. A database error
    (DatabaseUnreachable) keeps the last read (logged); nothing is exported before the
    first forecast is stored.
    """

    def __init__(self, read: Callable[[], list[dict[str, Any]]], refresh: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._read = read
        self._refresh = refresh
        self._clock = clock
        self._documents: list[dict[str, Any]] = []
        self._read_at = -math.inf

    def describe(self) -> list[Metric]:
        """Nothing up front: the families depend on what is stored."""
        return []

    def collect(self) -> Iterator[Metric]:
        """The gauges of the forecasts last read (read again when due)."""
        if self._clock() - self._read_at >= self._refresh:
            try:
                self._documents = self._read()
                self._read_at = self._clock()
            except DatabaseUnreachable as exc:
                LOG.warning("forecasts unreadable for the metrics: %s", exc)
        if not self._documents:
            return
        labels = ["model", "availability_zone"]
        families = {
            "days_to_exhaustion": GaugeMetricFamily(
                "cortex_gpu_days_to_exhaustion",
                "Days until the GPUs in use are projected to reach the supply (+Inf: not "
                "within the forecast horizon).", labels=labels),
            "days_to_exhaustion_pessimistic": GaugeMetricFamily(
                "cortex_gpu_days_to_exhaustion_pessimistic",
                "Days to exhaustion at the early end of the forecast interval.",
                labels=labels),
            "supply_gpus": GaugeMetricFamily(
                "cortex_gpu_forecast_supply_gpus",
                "Whole GPUs the forecast counts as supply.", labels=labels),
            "used_gpus": GaugeMetricFamily(
                "cortex_gpu_forecast_used_gpus",
                "Whole GPUs in use when the forecast was computed.", labels=labels),
        }
        computed = 0.0
        for document in self._documents:
            if document.get("flavor_family") is not None:
                continue  # demand alone: no supply to run out of
            values = [document["model"], document["availability_zone"] or ""]
            for key, family in families.items():
                value = document.get(key)
                family.add_metric(values, math.inf if value is None else float(value))
            computed = max(computed, datetime.fromisoformat(document["computed_at"]).timestamp())
        yield from families.values()
        yield GaugeMetricFamily("cortex_gpu_forecast_timestamp_seconds",
                                "When the stored GPU forecasts were computed (Unix time).",
                                value=computed)
