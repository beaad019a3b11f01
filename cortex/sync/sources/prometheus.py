"""Prometheus: configured PromQL queries into per-host series, samples and host features.

Each query of the queries file (``etc/cortex/prometheus-queries.yaml``) names a
feature, its PromQL, its unit and how a series finds its host:

- *instant* queries (``GET /api/v1/query``) give the feature's value now; their
  results replace ``prometheus_latest`` (a series that went stale in Prometheus
  is not returned and so disappears);
- *range* queries (``range: {step, window}``, ``GET /api/v1/query_range``) add
  samples to ``prometheus_samples``, from the newest stored sample onwards (at
  most ``window`` back), aligned to ``step``; samples older than ``[prometheus]
  retention_hours`` are deleted.

The host of a series is the value of the first of ``host_labels`` it carries
(``Hostname`` of the DCGM exporter, ``instance`` of node_exporter, ...),
normalised: lower case, without ``:port``, and matched to a Nova host by its
host name, node name, host IP or their short names (FQDN vs short name); a value
matching no hypervisor is kept as its short name. ``NaN`` and infinite values are
skipped. The host feature is the ``aggregate`` (mean, max, min, sum, count) of a
host's series' newest values, ignoring series older than ``[prometheus]
staleness_seconds``; range features also get ``<feature>.window_mean``, the mean
of the window's samples. A query Prometheus rejects (``bad_data``,
``execution``: HTTP 400/422) is reported in the run's warnings and keeps its
previous data; an unreachable or failing Prometheus fails the run.

With ``[network] prometheus_query`` set, the same run also maps that query's series
to hosts' network locations (see :mod:`cortex.sync.sources.prometheus_network`).
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests
from sqlalchemy import delete, func, select

from cortex.conf import Config, ConfigError, shipped_file
from cortex.db import models
from cortex.documents import load_document
from cortex.store import network as network_rows
from cortex.sync import derive
from cortex.sync.openstack import SourceError
from cortex.sync.snapshot import TableCounts, append_rows
from cortex.sync.source import Source, SyncContext
from cortex.sync.sources import prometheus_network
from cortex.sync.sources.prometheus_network import NetworkQuery

AGGREGATES = {
    "mean": lambda values: sum(values) / len(values),
    "max": max, "min": min, "sum": sum, "count": lambda values: float(len(values)),
}
DEFAULT_HOST_LABELS = ("Hostname", "hostname", "host", "instance", "node")
MAX_POINTS = 10000  # Prometheus refuses more than 11,000 points per series per range query
QUERIES_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["queries"], "additionalProperties": False,
    "properties": {
        "host_labels": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "queries": {"type": "array", "items": {
            "type": "object", "required": ["feature", "query", "unit"],
            "additionalProperties": False,
            "properties": {
                "feature": {"type": "string", "pattern": "^[a-zA-Z_][a-zA-Z0-9_.:]*$"},
                "query": {"type": "string", "minLength": 1},
                "unit": {"type": "string", "minLength": 1},
                "description": {"type": "string"},
                "host_labels": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "series_labels": {"type": "array", "items": {"type": "string"}},
                "aggregate": {"enum": sorted(AGGREGATES)},
                "range": {"type": "object", "required": ["step", "window"],
                          "additionalProperties": False,
                          "properties": {"step": {"type": "number", "exclusiveMinimum": 0},
                                         "window": {"type": "number", "exclusiveMinimum": 0}}},
            }}},
    },
}


@dataclass(frozen=True)
class Query:
    """One configured query; ``step``/``window`` in seconds for range queries, else None."""

    feature: str
    query: str
    unit: str
    host_labels: tuple[str, ...]
    series_labels: tuple[str, ...] | None = None
    aggregate: str = "mean"
    step: float | None = None
    window: float | None = None


def load_queries(path: str | Path) -> list[Query]:
    """Read and validate a queries file; ConfigError naming the file and the bad field."""
    data = load_document(path, QUERIES_SCHEMA, ConfigError, empty={})
    host_labels = tuple(data.get("host_labels", DEFAULT_HOST_LABELS))
    queries = []
    for entry in data["queries"]:
        window = entry.get("range") or {}
        series = entry.get("series_labels")
        queries.append(Query(
            entry["feature"], entry["query"], entry["unit"],
            tuple(entry.get("host_labels", host_labels)),
            None if series is None else tuple(series), entry.get("aggregate", "mean"),
            window.get("step"), window.get("window")))
    names = [q.feature for q in queries]
    if len(names) != len(set(names)):
        raise ConfigError(f"{path}: a feature is defined twice")
    return queries


def normalise_host(value: str) -> str:
    """Lower case, without a ``:port`` suffix or IPv6 brackets (``[::1]:9100`` -> ``::1``)."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value[1:]
    if value.count(":") == 1:
        return value.split(":", 1)[0]
    return value


def short_name(value: str) -> str:
    """The first DNS label of a name (``cmp0001.cloud.example`` -> ``cmp0001``); IPs unchanged."""
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        return value.split(".", 1)[0]


class HostResolver:
    """Maps a label value to a Nova host by host name, node name, host IP or short names."""

    def __init__(self, hypervisors: list[tuple[str, str, str | None]]) -> None:
        exact: dict[str, str] = {}
        short: dict[str, str] = {}
        for host, node, host_ip in hypervisors:
            for name in (host, node, host_ip):
                if name:
                    exact.setdefault(name.lower(), host)
                    short.setdefault(short_name(name.lower()), host)
        self._exact, self._short = exact, short

    def resolve(self, value: str) -> tuple[str, bool]:
        """``(host, matched)``: the Nova host, or the value's short name when none matches."""
        normal = normalise_host(value)
        if normal in self._exact:
            return self._exact[normal], True
        brief = short_name(normal)
        if brief in self._short:
            return self._short[brief], True
        return brief, False


@dataclass
class SeriesValues:
    """The points of one result series, by host and series key."""

    host: str
    series: str
    points: list[tuple[float, float]] = field(default_factory=list)


class PrometheusSource(Source):
    """Sync the configured queries from the Prometheus HTTP API at ``url``."""

    name = "prometheus"

    def __init__(self, url: str, queries: list[Query], timeout: float = 30.0,
                 retention_hours: float = 24.0, staleness_seconds: float = 300.0,
                 session: requests.Session | None = None,
                 clock=time.time, network: NetworkQuery | None = None) -> None:
        self._url = url.rstrip("/")
        self._queries = queries
        self._timeout = timeout
        self._retention = retention_hours * 3600
        self._staleness = staleness_seconds
        self._session = session or requests.Session()
        self._clock = clock
        self._network = network

    @classmethod
    def from_conf(cls, conf: Config) -> PrometheusSource:
        """The source of ``[prometheus]`` and ``[network] prometheus_*``.

        ConfigError without a URL, with a bad queries file or bad network labels.
        """
        url = conf.get("prometheus", "url")
        if not url:
            raise ConfigError("[prometheus] url is required for the prometheus source")
        path = conf.get("prometheus", "queries_file") or shipped_file("prometheus-queries.yaml")
        return cls(url, load_queries(path), conf.get("prometheus", "timeout"),
                   conf.get("prometheus", "retention_hours"),
                   conf.get("prometheus", "staleness_seconds"),
                   network=NetworkQuery.from_conf(conf))

    def sync(self, ctx: SyncContext) -> None:
        """Run every query; write latest values, samples, retention and host features.

        With a network query configured, also the hosts' network locations.
        """
        now = self._clock()
        table = models.Hypervisor.__table__
        resolver = HostResolver(list(ctx.connection.execute(
            select(table.c.host, table.c.node, table.c.host_ip))))
        failed: set[str] = set()
        latest = ctx.snapshot(models.PrometheusLatest, ("feature", "host", "series"))
        unmatched: set[str] = set()
        for query in self._queries:
            try:
                if query.step is None:
                    series = self._instant(ctx, query, now, resolver, unmatched)
                    latest.add({"feature": query.feature, "host": s.host, "series": s.series,
                                "ts": _time(ts), "value": value}
                               for s in series for ts, value in s.points[-1:])
                else:
                    self._range(ctx, query, now, resolver, unmatched)
            except QueryRejected as exc:
                ctx.warn(str(exc))
                failed.add(query.feature)
        latest.keep(lambda key: key[0] in failed)
        latest.finish()
        if self._network is not None:
            self._locations(ctx, now, resolver, unmatched)
        self._apply_retention(ctx, now)
        ctx.detail.update(unmatched_hosts=sorted(unmatched)[:50], failed_queries=sorted(failed))
        self._features(ctx, now)

    def _instant(self, ctx, query: Query, now: float, resolver, unmatched) -> list[SeriesValues]:
        """The vector of an instant query at ``now``, as series with one point each."""
        data = self._call(ctx, "query", {"query": query.query, "time": f"{now:.3f}"},
                          query.feature)
        if data.get("resultType") != "vector":
            raise QueryRejected(f"{query.feature}: instant query returned "
                                f"{data.get('resultType')}, not a vector")
        return self._series(query, [(r["metric"], [r["value"]]) for r in data["result"]],
                            resolver, unmatched)

    def _range(self, ctx, query: Query, now: float, resolver, unmatched) -> None:
        """Fetch the samples after the newest stored one (at most ``window`` back) and store."""
        table = models.PrometheusSample.__table__
        newest = ctx.connection.execute(select(func.max(table.c.ts)).where(
            table.c.feature == query.feature)).scalar()
        start = now - query.window
        if newest is not None:
            start = max(start, _epoch(newest) + query.step)
        start = math.ceil(start / query.step) * query.step
        end = math.floor(now / query.step) * query.step
        while start <= end:
            chunk_end = min(end, start + query.step * (MAX_POINTS - 1))
            data = self._call(ctx, "query_range", {
                "query": query.query, "start": f"{start:.3f}", "end": f"{chunk_end:.3f}",
                "step": f"{query.step:g}"}, query.feature)
            if data.get("resultType") != "matrix":
                raise QueryRejected(f"{query.feature}: range query returned "
                                    f"{data.get('resultType')}, not a matrix")
            series = self._series(query, [(r["metric"], r["values"]) for r in data["result"]],
                                  resolver, unmatched)
            ctx.count(table.name, append_rows(ctx.connection, table, (
                {"feature": query.feature, "host": s.host, "series": s.series, "ts": _time(ts),
                 "value": value} for s in series for ts, value in s.points),
                ("feature", "host", "series", "ts"), ctx.batch_size))
            start = chunk_end + query.step

    def _series(self, query: Query, results, resolver: HostResolver,
                unmatched: set[str]) -> list[SeriesValues]:
        """Result series keyed by host and series labels; NaN and infinities dropped."""
        by_key: dict[tuple[str, str], SeriesValues] = {}
        for metric, values in results:
            label = next((name for name in query.host_labels if metric.get(name)), None)
            if label is None:
                continue
            host, matched = resolver.resolve(metric[label])
            if not matched:
                unmatched.add(metric[label])
            key = (host, _series_key(metric, label, query.series_labels))
            target = by_key.setdefault(key, SeriesValues(*key))
            for ts, raw in values:
                value = float(raw)
                if math.isfinite(value):
                    target.points.append((float(ts), value))
        return [s for s in by_key.values() if s.points]

    def _locations(self, ctx: SyncContext, now: float, resolver: HostResolver,
                   unmatched: set[str]) -> None:
        """Replace the ``prometheus`` network locations with those the network query gives.

        A query Prometheus rejects (or that is not a vector) is a warning and keeps the
        previous locations; bad series are skipped and counted in ``detail["network"]``.
        """
        query = self._network
        try:
            data = self._call(ctx, "query", {"query": query.query, "time": f"{now:.3f}"},
                              "network location")
            if data.get("resultType") != "vector":
                raise QueryRejected(f"network location: instant query returned "
                                    f"{data.get('resultType')}, not a vector")
        except QueryRejected as exc:
            ctx.warn(str(exc))
            ctx.detail["network"] = {"failed": True}
            return

        def resolve(value: str) -> str:
            host, matched = resolver.resolve(value)
            if not matched:
                unmatched.add(value)
            return host

        skipped = prometheus_network.Skipped()
        found = [location for result in data["result"] if (
            location := prometheus_network.parse_series(query, result["metric"], resolve,
                                                        skipped)) is not None]
        earlier_hosts, earlier_domains = network_rows.earlier_rows(ctx.connection, self.name)
        locations, placed_earlier = prometheus_network.resolve_locations(
            found, earlier_hosts, earlier_domains, skipped)
        domains, hosts = prometheus_network.domain_rows(locations, earlier_domains, self.name)
        for table, written in network_rows.replace_source_rows(
                ctx.connection, self.name, domains, hosts).items():
            ctx.count(table, TableCounts(written.rows, written.upserted, written.deleted))
        ctx.detail["network"] = {"locations": len(hosts), "placed_by_file": placed_earlier,
                                 "skipped_malformed": skipped.malformed,
                                 "skipped_conflicting": skipped.conflicting}
        if skipped.malformed or skipped.conflicting:
            ctx.warn(f"network location: skipped {skipped.malformed} malformed series and "
                     f"{skipped.conflicting} conflicting hosts (see the sync log)")

    def _call(self, ctx: SyncContext, endpoint: str, params: dict[str, str],
              name: str) -> dict[str, Any]:
        """One API call for query ``name``; its ``data``.

        SourceError when Prometheus fails, QueryRejected for 4xx.
        """
        url = f"{self._url}/api/v1/{endpoint}"
        try:
            response = self._session.get(url, params=params, timeout=self._timeout)
        except requests.RequestException as exc:
            raise SourceError(f"prometheus {endpoint}: {type(exc).__name__}: {exc}") from None
        try:
            body = response.json()
        except ValueError:
            raise SourceError(f"prometheus {endpoint}: HTTP {response.status_code}, not JSON: "
                              f"{response.text[:200]!r}", response.status_code) from None
        for warning in body.get("warnings") or ():
            ctx.warn(f"{name}: {warning}")
        if body.get("status") == "success" and isinstance(body.get("data"), dict):
            return body["data"]
        message = (f"{name}: {body.get('errorType', 'error')}: "
                   f"{body.get('error', 'no error text')} (HTTP {response.status_code})")
        if response.status_code in (400, 422):
            raise QueryRejected(message)
        raise SourceError(f"prometheus {endpoint}: {message}", response.status_code)

    def _apply_retention(self, ctx: SyncContext, now: float) -> None:
        """Delete samples past the retention and samples of features no longer configured."""
        table = models.PrometheusSample.__table__
        ranged = [q.feature for q in self._queries if q.step is not None]
        deleted = ctx.connection.execute(delete(table).where(
            (table.c.ts < _time(now - self._retention)) | table.c.feature.not_in(ranged)
        )).rowcount
        ctx.count(table.name, _deleted(deleted))

    def _features(self, ctx: SyncContext, now: float) -> None:
        """Per host and feature, the aggregate of the series' newest values (and window means)."""
        fresh_after = _time(now - self._staleness)
        points: dict[tuple[str, str], list[tuple[float, datetime]]] = defaultdict(list)
        latest = models.PrometheusLatest.__table__
        for feature, host, ts, value in ctx.connection.execute(select(
                latest.c.feature, latest.c.host, latest.c.ts, latest.c.value)):
            points[(host, feature)].append((value, ts))
        means: dict[tuple[str, str], float] = {}
        for query in self._queries:
            if query.step is not None:
                points.update(_newest_samples(ctx.connection, query.feature))
                means.update(_window_means(ctx.connection, query.feature,
                                           _time(now - query.window)))
        queries = {q.feature: q for q in self._queries}
        features = {}
        for (host, feature), found in points.items():
            fresh = [(v, ts) for v, ts in found if _aware(ts) >= fresh_after]
            if feature in queries and fresh:
                query = queries[feature]
                at = max(_aware(ts) for _, ts in fresh)
                features[(host, feature)] = (
                    AGGREGATES[query.aggregate]([v for v, _ in fresh]), query.unit, at)
                if (host, feature) in means:
                    features[(host, f"{feature}.window_mean")] = (
                        means[(host, feature)], query.unit, at)
        derive.replace_features(ctx, self.name, features)


def _newest_samples(connection, feature: str) -> dict[tuple[str, str], list]:
    """``{(host, feature): [(value, ts)]}``: the newest sample of each series of ``feature``."""
    table = models.PrometheusSample.__table__
    newest = (select(table.c.host, table.c.series, func.max(table.c.ts).label("ts"))
              .where(table.c.feature == feature)
              .group_by(table.c.host, table.c.series).subquery())
    rows = connection.execute(
        select(table.c.host, table.c.value, table.c.ts).join(newest, (
            table.c.host == newest.c.host) & (table.c.series == newest.c.series) & (
            table.c.ts == newest.c.ts)).where(table.c.feature == feature))
    found: dict[tuple[str, str], list] = defaultdict(list)
    for host, value, ts in rows:
        found[(host, feature)].append((value, ts))
    return found


def _window_means(connection, feature: str, since: datetime) -> dict[tuple[str, str], float]:
    """``{(host, feature): mean}`` of the samples of ``feature`` since ``since``."""
    table = models.PrometheusSample.__table__
    rows = connection.execute(
        select(table.c.host, func.avg(table.c.value))
        .where(table.c.feature == feature, table.c.ts >= since).group_by(table.c.host))
    return {(host, feature): float(mean) for host, mean in rows}


def _aware(value: datetime) -> datetime:
    """SQLite returns naive UTC datetimes; PostgreSQL aware ones."""
    return value if value.tzinfo else value.replace(tzinfo=UTC)


class QueryRejected(SourceError):
    """Prometheus refused one query (bad PromQL, execution error); the others go on."""


def _series_key(metric: dict[str, str], host_label: str,
                series_labels: tuple[str, ...] | None) -> str:
    """``a="1",b="2"``: the labels that tell a host's series apart (sorted, no host, no name)."""
    names = series_labels if series_labels is not None else tuple(
        n for n in metric if n not in (host_label, "__name__"))
    return ",".join(f'{n}="{metric[n]}"' for n in sorted(names) if n in metric)


def _time(epoch: float) -> datetime:
    """A Unix time as an aware UTC datetime."""
    return datetime.fromtimestamp(epoch, UTC)


def _epoch(value: datetime) -> float:
    """An aware (or UTC-naive) datetime as a Unix time."""
    return _aware(value).timestamp()


def _deleted(rows: int) -> TableCounts:
    """TableCounts of a plain delete."""
    return TableCounts(deleted=rows)
