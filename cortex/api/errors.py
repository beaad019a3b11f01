"""Error answers in the OpenStack API-WG shape, never with a stack trace.

A browser that asks for a page that is not there (404) or with the wrong method (405)
gets a small HTML page in the dashboard's look instead; see :func:`wants_html`.
"""

from __future__ import annotations

from flask import Response, g, jsonify, render_template, request
from werkzeug.exceptions import HTTPException

TITLES = {400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
          413: "Request Entity Too Large", 415: "Unsupported Media Type",
          500: "Internal Server Error", 503: "Service Unavailable"}
#: Statuses a browser gets as an HTML page (the others stay JSON for everyone).
HTML_STATUSES = (404, 405)
#: Paths that answer JSON whatever the caller accepts (Nova, Cinder and Manila call them).
JSON_ONLY_PREFIX = "/scheduler/"


class ApiError(Exception):
    """Raised by handlers to answer ``status`` with ``detail``; ``code`` is machine-readable."""

    def __init__(self, status: int, detail: str, code: str | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.code = code


def wants_html() -> bool:
    """Whether the current request is a browser's: its ``Accept`` prefers HTML to JSON.

    Judged by the quality werkzeug gives ``text/html`` and ``application/json``; a tie
    (``*/*``, ``application/json, */*``) or no ``Accept`` at all means JSON. False on the
    external scheduler endpoints (``/scheduler/...``), which always answer JSON.
    """
    if request.path.startswith(JSON_ONLY_PREFIX):
        return False
    accept = request.accept_mimetypes
    return accept.quality("text/html") > accept.quality("application/json")


def error_response(status: int, detail: str, code: str | None = None) -> Response:
    """``{"errors": [{"status", "title", "detail", "request_id", "code"?}]}`` with ``status``.

    For a browser (:func:`wants_html`) and a status in :data:`HTML_STATUSES`, the same
    fields as an HTML page (``error.html``) instead.
    """
    error = {"status": status, "title": TITLES.get(status, "Error"), "detail": detail,
             "request_id": g.get("request_id", "")}
    if code:
        error["code"] = code
    if status in HTML_STATUSES and wants_html():
        response = Response(render_template("error.html", error=error), status,
                            mimetype="text/html")
    else:
        response = jsonify(errors=[error])
        response.status_code = status
    if status in HTML_STATUSES and not request.path.startswith(JSON_ONLY_PREFIX):
        response.vary.add("Accept")  # a cache must not hand the page to an API client
    return response


def http_error(exc: HTTPException) -> Response:
    """Werkzeug's HTTP errors (404, 405, 413…) as API-WG bodies; 405 keeps ``Allow``."""
    response = error_response(exc.code or 500, exc.description or TITLES.get(exc.code, ""))
    valid = getattr(exc, "valid_methods", None)
    if valid:
        response.headers["Allow"] = ", ".join(m for m in valid if m != "OPTIONS")
    return response
