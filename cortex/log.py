"""Logging: every line of a request carries our request id and the caller's ids."""

from __future__ import annotations

import json
import logging
import sys

from flask import g, has_app_context

from cortex.conf import Config

TEXT_FORMAT = ("%(asctime)s %(process)d %(levelname)s %(name)s "
               "[%(request_id)s caller=%(caller_request_id)s global=%(global_request_id)s] "
               "%(message)s")


class RequestContextFilter(logging.Filter):
    """Adds ``request_id`` (ours), ``caller_request_id`` and ``global_request_id`` to records."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Fill the three ids from ``flask.g`` (``-`` outside a request)."""
        ids = ("-", "-", "-")
        if has_app_context():
            caller = g.get("caller_ids") or (None, None)
            ids = (g.get("request_id") or "-", caller[0] or "-", caller[1] or "-")
        record.request_id, record.caller_request_id, record.global_request_id = ids
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
