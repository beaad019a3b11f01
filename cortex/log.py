"""Logging: every line of a request carries our request id and the caller's ids.

The ids live in a context variable: the API binds its own id when a request starts
(:func:`bind_request`), whoever turns a body into a request adds the caller's
(:func:`bind_caller`), and the API clears them when the request ends. No web framework
is needed to read them.
"""

from __future__ import annotations

import json
import logging
import sys
from contextvars import ContextVar

from cortex.conf import Config

#: (our request id, the caller's request id, the caller's global request id); None: unknown.
_IDS: ContextVar[tuple[str | None, str | None, str | None]] = ContextVar(
    "cortex_request_ids", default=(None, None, None))

TEXT_FORMAT = ("%(asctime)s %(process)d %(levelname)s %(name)s "
               "[%(request_id)s caller=%(caller_request_id)s global=%(global_request_id)s] "
               "%(message)s")


def bind_request(request_id: str | None) -> None:
    """From now on in this context, lines carry ``request_id`` and no caller ids (None: none)."""
    _IDS.set((request_id, None, None))


def bind_caller(request_id: str | None, global_request_id: str | None) -> None:
    """From now on in this context, lines carry the caller's request and global request ids."""
    _IDS.set((_IDS.get()[0], request_id, global_request_id))


class RequestContextFilter(logging.Filter):
    """Adds ``request_id`` (ours), ``caller_request_id`` and ``global_request_id`` to records."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Fill the three ids from the bound ones (``-`` for each not bound)."""
        ids = _IDS.get()
        record.request_id, record.caller_request_id, record.global_request_id = (
            value or "-" for value in ids)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line, for log shippers."""

    def format(self, record: logging.LogRecord) -> str:
        """Serialise the record's main fields and ids."""
        document = {"time": self.formatTime(record), "level": record.levelname,
                    "logger": record.name, "message": record.getMessage(),
                    "request_id": record.request_id,
                    "caller_request_id": record.caller_request_id,
                    "global_request_id": record.global_request_id}
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return json.dumps(document)


def setup_logging(conf: Config) -> None:
    """Configure the root logger on stderr from ``[DEFAULT] debug`` and ``log_format``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RequestContextFilter())
    if conf.get("DEFAULT", "log_format") == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if conf.get("DEFAULT", "debug") else logging.INFO)
