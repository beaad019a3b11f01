"""The scheduling timeline: decisions counted per time bucket, service, pipeline and outcome.

Behind the dashboard's ``/ui/timeline``. The counting is one ``GROUP BY`` in the
database over the indexed columns of the ``decisions`` table (``created_at``,
``service``, ``pipeline``, ``outcome``); the ``record`` JSON of a decision is never
read, so a window of a million decisions costs one index range scan and returns at
most ``buckets x (service, pipeline, outcome)`` rows.

The bucket of a decision is ``floor(epoch seconds of created_at / step)``, written
for each supported dialect by :class:`EpochBucket` (PostgreSQL: ``extract(epoch
from ...)``; SQLite, the embedded default, where a ``created_at`` is stored as UTC
text: ``strftime('%s', ...)``). Buckets are aligned to the Unix epoch, so with a
step of a day they start at 00:00 UTC.

Refusals and failures are told apart by the ``outcome`` column alone (see
:data:`cortex.decision.OUTCOMES`): ``rejected`` is a call answered with a 4xx
(no pipeline fits, a bad body), ``error`` one answered with a 5xx: Cortex's only
5xx to a caller is 503 (no knowledge, a fail-closed step failed, the time budget ran
out, an unexpected error), so the ``error`` count is the count of 503s; the exact
status is kept only inside the record JSON, which this query does not read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import MappingProxyType

from sqlalchemy import BigInteger, Connection, func, literal_column, select
from sqlalchemy.exc import CompileError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement

from cortex.db.models import Decision as DecisionRow

#: Bucket widths the timeline may use, in seconds: the smallest one that keeps the
#: window within ``max_buckets`` is taken (1 minute for the last hour or two).
STEPS = (60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
#: The widest window, in hours (the default decision retention is 30 days).
MAX_HOURS = 720
#: The most buckets a timeline has by default.
MAX_BUCKETS = 120


class EpochBucket(FunctionElement):
    """SQL ``floor(<epoch seconds of a timestamp column> / step)`` as a BIGINT.

    Built as ``EpochBucket(column, literal_column("60"))``: the step is rendered as a
    literal integer, never a bound parameter, so the expression is the same text in
    ``SELECT`` and ``GROUP BY`` (PostgreSQL would refuse two different placeholders)
    and part of the statement cache key. Compiles for PostgreSQL and SQLite; another
    dialect raises :class:`sqlalchemy.exc.CompileError`.
    """

    type = BigInteger()
    name = "epoch_bucket"
    inherit_cache = True


@compiles(EpochBucket)
def _bucket_unsupported(element: EpochBucket, compiler, **kw) -> str:
    """Dialects without a rendering of :class:`EpochBucket`: a CompileError."""
    raise CompileError(f"epoch buckets are not written for {compiler.dialect.name}")


@compiles(EpochBucket, "postgresql")
def _bucket_postgresql(element: EpochBucket, compiler, **kw) -> str:
    """``CAST(floor(extract(epoch FROM col) / step) AS BIGINT)`` (timestamptz: UTC epoch)."""
    column, step = (compiler.process(c, **kw) for c in element.clauses)
    return f"CAST(floor(extract(epoch FROM {column}) / {step}) AS BIGINT)"


@compiles(EpochBucket, "sqlite")
def _bucket_sqlite(element: EpochBucket, compiler, **kw) -> str:
    """``CAST(strftime('%s', col) AS INTEGER) / step``: integer division of UTC seconds."""
    column, step = (compiler.process(c, **kw) for c in element.clauses)
    return f"(CAST(strftime('%s', {column}) AS INTEGER) / {step})"


@dataclass(frozen=True)
class Timeline:
    """Decisions per bucket: ``counts[(service, pipeline, outcome)][i]`` in bucket ``i``.

    ``start`` (aware, UTC) is the start of bucket 0, ``step`` its width in seconds,
    ``buckets`` how many there are: bucket ``i`` covers ``[start + i*step, start +
    (i+1)*step)`` and the last one holds ``now``. ``pipeline`` is None for calls
    refused before a pipeline was chosen. Each count tuple has ``buckets`` entries;
    keys without any decision in the window are absent.
    """

    start: datetime
    step: int
    buckets: int
    counts: Mapping[tuple[str, str | None, str], tuple[int, ...]]

    @property
    def end(self) -> datetime:
        """The end of the last bucket (exclusive), UTC."""
        return self.start + timedelta(seconds=self.step * self.buckets)

    def bucket_start(self, index: int) -> datetime:
        """The start of bucket ``index`` (UTC)."""
        return self.start + timedelta(seconds=self.step * index)


def bucket_seconds(hours: int, max_buckets: int = MAX_BUCKETS) -> int:
    """The bucket width in seconds for a window of ``hours`` hours.

    The first of :data:`STEPS` that needs at most ``max_buckets`` buckets (the widest
    step if none does): 60 for 1 or 2 hours, 900 for a day, 21600 for 30 days.
    """
    span = hours * 3600
    return next((s for s in STEPS if math.ceil(span / s) <= max_buckets), STEPS[-1])


def decision_timeline(connection: Connection, hours: int, now: datetime,
                      service: str | None = None, pipeline: str | None = None,
                      max_buckets: int = MAX_BUCKETS) -> Timeline:
    """Count the decisions of the last ``hours`` hours before ``now`` per bucket.

    ``hours``: an int, 1 to :data:`MAX_HOURS` (ValueError otherwise); ``now``: an aware
    datetime (ValueError if naive). The step is :func:`bucket_seconds`; the window is
    ``ceil(hours * 3600 / step)`` buckets ending with the one holding ``now``, so it
    covers at least ``hours`` hours. Decisions dated after that bucket are left out.
    ``service`` and ``pipeline`` (None or empty: all) filter by equality. One query,
    grouped in the database; the ``record`` column is not read.
    """
    if isinstance(hours, bool) or not isinstance(hours, int) or not 1 <= hours <= MAX_HOURS:
        raise ValueError(f"hours must be an integer from 1 to {MAX_HOURS}")
    if now.tzinfo is None:
        raise ValueError("now must be an aware datetime")
    step = bucket_seconds(hours, max_buckets)
    buckets = math.ceil(hours * 3600 / step)
    last = math.floor(now.timestamp() / step)
    first = last - buckets + 1
    start = datetime.fromtimestamp(first * step, UTC)
    end = datetime.fromtimestamp((last + 1) * step, UTC)
    bucket = EpochBucket(DecisionRow.created_at, literal_column(str(int(step))))
    query = (select(bucket.label("bucket"), DecisionRow.service, DecisionRow.pipeline,
                    DecisionRow.outcome, func.count().label("n"))
             .where(DecisionRow.created_at >= start, DecisionRow.created_at < end)
             .group_by(bucket, DecisionRow.service, DecisionRow.pipeline, DecisionRow.outcome))
    if service:
        query = query.where(DecisionRow.service == service)
    if pipeline:
        query = query.where(DecisionRow.pipeline == pipeline)
    counts: dict[tuple[str, str | None, str], list[int]] = {}
    for index, svc, pipe, outcome, n in connection.execute(query):
        position = int(index) - first
        if 0 <= position < buckets:  # a stored time off by a rounding at the edges
            counts.setdefault((svc, pipe, outcome), [0] * buckets)[position] += int(n)
    return Timeline(start, step, buckets,
                    MappingProxyType({k: tuple(v) for k, v in sorted(
                        counts.items(), key=lambda kv: tuple(x or "" for x in kv[0]))}))
