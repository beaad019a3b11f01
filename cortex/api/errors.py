"""Error answers in the OpenStack API-WG shape, never with a stack trace."""

from __future__ import annotations

from flask import Response, g, jsonify
from werkzeug.exceptions import HTTPException

TITLES = {400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
          413: "Request Entity Too Large", 415: "Unsupported Media Type",
          500: "Internal Server Error", 503: "Service Unavailable"}


class ApiError(Exception):
    """Raised by handlers to answer ``status`` with ``detail``; ``code`` is machine-readable."""

    def __init__(self, status: int, detail: str, code: str | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.code = code


def error_response(status: int, detail: str, code: str | None = None) -> Response:
    """``{"errors": [{"status", "title", "detail", "request_id", "code"?}]}`` with ``status``."""
    error = {"status": status, "title": TITLES.get(status, "Error"), "detail": detail,
             "request_id": g.get("request_id", "")}
    if code:
        error["code"] = code
    response = jsonify(errors=[error])
    response.status_code = status
    return response


def http_error(exc: HTTPException) -> Response:
    """Werkzeug's HTTP errors (404, 405, 413…) as API-WG bodies; 405 keeps ``Allow``."""
    response = error_response(exc.code or 500, exc.description or TITLES.get(exc.code, ""))
    valid = getattr(exc, "valid_methods", None)
    if valid:
        response.headers["Allow"] = ", ".join(m for m in valid if m != "OPTIONS")
    return response
