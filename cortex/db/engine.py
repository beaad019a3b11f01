"""Engines and sessions: one engine per process, built from the configured URL."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg.adapt
import psycopg.types.json
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from cortex.db.guard import guard_engine
from cortex.jsontext import may_hold_big_integer

try:  # the "fast" extra
    import orjson
except ImportError:  # pragma: no cover - exercised where orjson is not installed
    orjson = None


#: PostgreSQL: this transaction's COMMIT returns before its WAL reaches the disk. For
#: best-effort writes (decision records, reservation hints): a server crash may lose the
#: last moment's of them, never corrupt anything.
NO_WAIT_FOR_FLUSH = "SET LOCAL synchronous_commit = off"


@dataclass(frozen=True)
class ConnectionLimits:
    """How long a PostgreSQL connection may wait, as libpq connection parameters.

    ``statement_timeout`` and ``lock_timeout`` (seconds; 0: none) are the server's
    (sent as ``options=-c statement_timeout=<ms> -c lock_timeout=<ms>``): a statement
    or a lock wait (the reservations' advisory lock included) that runs longer is
    cancelled by the server. ``keepalives_idle``/``keepalives_interval`` (s) and
    ``keepalives_count`` are the TCP keepalives, ``tcp_user_timeout`` (s; 0: the
    OS's) how long sent data may stay unacknowledged: together they notice a server
    or network that went away without closing the connection (a dead host, a cut
    link) within ``idle + interval * count`` s. None of them helps against a server
    whose processes hang with their sockets open: :mod:`cortex.db.guard` bounds that
    on the client. Defaults match ``[database]`` in cortex.conf. The parameters are
    libpq's (PostgreSQL manual, "Parameter Key Words"); psycopg passes them through.
    """

    statement_timeout: float = 30.0
    lock_timeout: float = 2.0
    keepalives_idle: int = 5
    keepalives_interval: int = 2
    keepalives_count: int = 3
    tcp_user_timeout: float = 10.0

    @classmethod
    def from_conf(cls, conf: Any) -> ConnectionLimits:
        """The limits of ``conf``'s ``[database]`` section (a :class:`cortex.conf.Config`)."""
        return cls(**{name: conf.get("database", name) for name in cls.__dataclass_fields__})

    def params(self) -> dict[str, Any]:
        """The libpq parameters: keepalives, ``tcp_user_timeout`` (ms) and ``options``."""
        params: dict[str, Any] = {
            "keepalives": 1, "keepalives_idle": self.keepalives_idle,
            "keepalives_interval": self.keepalives_interval,
            "keepalives_count": self.keepalives_count,
            "tcp_user_timeout": int(self.tcp_user_timeout * 1000)}
        options = [f"-c {name}={int(value * 1000)}" for name, value in
                   (("statement_timeout", self.statement_timeout),
                    ("lock_timeout", self.lock_timeout)) if value]
        if options:
            params["options"] = " ".join(options)
        return params


#: Keepalives only: what engines made without limits get (the CLI, the sync, tests).
KEEPALIVES_ONLY = ConnectionLimits(statement_timeout=0, lock_timeout=0)


def make_engine(url: str, connect_timeout: int = 3, limits: ConnectionLimits | None = None,
                **kwargs) -> Engine:
    """A SQLAlchemy engine for ``url`` (``postgresql+psycopg://…`` or ``sqlite:///path``).

    SQLite: creates the parent directory of the file and turns on foreign keys and
    WAL, since it is the embedded single-process default. PostgreSQL: every connection
    gets ``connect_timeout`` (s) and the libpq parameters of ``limits`` (default:
    TCP keepalives only, no server-side timeouts); checkouts are watched inside
    :func:`cortex.db.guard.deadline` (:func:`~cortex.db.guard.guard_engine`); with
    ``pool_pre_ping`` (default on) a pooled connection is pinged at checkout, so a
    restarted server does not fail the first request after it, and the ping too is
    watched. json/jsonb values are read with :func:`loads_json` when orjson is
    installed.
    """
    kwargs.setdefault("json_serializer", dumps_json)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    ping = kwargs.pop("pool_pre_ping", True)
    connect_args = {"connect_timeout": connect_timeout,
                    **(limits or KEEPALIVES_ONLY).params()}
    kwargs["connect_args"] = connect_args | kwargs.get("connect_args", {})
    psycopg3 = parsed.get_driver_name() == "psycopg"
    engine = create_engine(url, pool_pre_ping=ping and not psycopg3, **kwargs)
    if psycopg3:
        guard_engine(engine, ping=ping)
        if orjson is not None:
            event.listen(engine, "connect", _read_json_fast)
        event.listen(engine, "connect", _read_times_bounded)
    return engine


def dumps_json(value: Any, utf8_only: bool = False) -> str:
    """The JSON text of ``value`` for JSON/JSONB columns.

    With orjson installed (the ``fast`` extra) it writes the text: a decision record of
    a 1,000-host request (every weigher's value per host) is ~10x faster to encode than
    with the standard library, and the writer thread that does it shares the worker's
    interpreter with the requests. The standard library writes what orjson refuses
    (other types, huge integers), so every value either can write is written; the one
    difference, a non-finite float (not JSON; PostgreSQL rejects it), becomes ``null``.
    ``utf8_only``: ValueError (UnicodeEncodeError) for a string holding a lone surrogate,
    which the standard library would otherwise write as an escape that orjson cannot
    read back (for a ``json`` column, which keeps the text as sent).
    """
    if orjson is not None:
        try:
            return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
        except TypeError:
            pass
    if not utf8_only:
        return json.dumps(value)
    text = json.dumps(value, ensure_ascii=False)
    text.encode()  # UnicodeEncodeError for a lone surrogate
    return text


def loads_json(data: Any) -> Any:
    """The value of a json/jsonb column's text (str, bytes or a buffer).

    orjson when installed: reading 600 in-flight reservations (two JSON columns each)
    took 8 instead of 11.4 µs a row. orjson turns an integer beyond 64 bits into a
    float, so a text that may hold one (:func:`cortex.jsontext.may_hold_big_integer`)
    goes to the standard library: every value reads back exactly as PostgreSQL stores it.
    """
    if isinstance(data, memoryview):
        data = bytes(data)
    if orjson is not None and not may_hold_big_integer(data):
        return orjson.loads(data)
    return json.loads(data)


def _read_json_fast(dbapi_connection, _record) -> None:
    """Have psycopg read json/jsonb with :func:`loads_json` on a new connection."""
    psycopg.types.json.set_json_loads(loads_json, dbapi_connection)


class UnreadableTime:
    """A stored time Python's ``datetime`` cannot hold (before year 1 or after 9999, UTC).

    What psycopg reads in its place, instead of failing the whole result: ``text`` is
    PostgreSQL's. Not a datetime, so a reader that needs the time refuses it (the
    knowledge loader skips the row, :mod:`cortex.knowledge.loader`).
    """

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"UnreadableTime({self.text!r})"


class _BoundedTimeLoader(psycopg.adapt.Loader):
    """psycopg's own (C) loader of a date/time type, and UnreadableTime for the rest.

    What the C loader refuses as beyond Python's range becomes an
    :class:`UnreadableTime`; the wrapper costs about 0.6 us a value.
    """

    def __init__(self, oid: int, context: Any = None) -> None:
        super().__init__(oid, context)
        self._load = psycopg.adapters.get_loader(oid, self.format)(oid, context).load

    def load(self, data: Any) -> Any:
        try:
            return self._load(data)
        except psycopg.DataError:
            return UnreadableTime(bytes(data).decode(errors="replace"))


class _BoundedTimeBinaryLoader(_BoundedTimeLoader):
    format = psycopg.pq.Format.BINARY


def _read_times_bounded(dbapi_connection, _record) -> None:
    """Read timestamps and dates beyond Python's years as :class:`UnreadableTime`.

    PostgreSQL holds years 4713 BC to 294276 AD; one such value in a result would
    otherwise fail the whole result with DataError.
    """
    for name in ("timestamptz", "timestamp", "date"):
        dbapi_connection.adapters.register_loader(name, _BoundedTimeLoader)
        dbapi_connection.adapters.register_loader(name, _BoundedTimeBinaryLoader)


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    """Enforce foreign keys and use WAL on every new SQLite connection."""
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.close()


def session_factory(engine: Engine) -> sessionmaker[Session]:
    """A sessionmaker bound to ``engine`` that keeps objects usable after commit."""
    return sessionmaker(engine, expire_on_commit=False)
