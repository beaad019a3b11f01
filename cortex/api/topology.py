"""``/v1/topology/<host>``: store a cortex-agent report, show the stored one."""

from __future__ import annotations

from datetime import UTC, datetime

from flask import current_app, jsonify

from cortex.api.body import read_json_body
from cortex.api.errors import ApiError
from cortex.api.schema import name_error
from cortex.services import reports

MAX_HOST = 255


def post_topology(host: str):
    """``POST /v1/topology/<host>``: validate, check, store with the arrival time; 200.

    403 when an agent reports for another host than its own (its static token's NAME,
    its Keystone user name; :meth:`cortex.api.auth.Authorizer.authorize_host`), before
    the body is read. 400 for a host name with control characters or over
    :data:`MAX_HOST` characters, a body that is not a ``TopologyReport``, names another
    host or is inconsistent (nothing is stored); 503 when the database fails.
    """
    services = current_app.extensions["cortex"]
    services.authorizer.authorize_host(host)
    if len(host) > MAX_HOST:
        raise ApiError(400, f"host name longer than {MAX_HOST} characters")
    problem = name_error(host)
    if problem:
        raise ApiError(400, f"host name {problem}")
    body = read_json_body()
    errors = services.validator.topology_errors(body)
    if errors:
        raise ApiError(400, "; ".join(errors))
    if body.get("host") not in (None, host):
        raise ApiError(400, f"the report is for host {body['host']!r}, not {host!r}")
    try:
        stored = reports.store(services.engine, host, body, datetime.now(UTC))
    except reports.TopologyError as exc:
        raise ApiError(400, str(exc)) from None
    except reports.DatabaseUnreachable as exc:
        raise ApiError(503, f"database unreachable: {exc}") from None
    return jsonify(stored)


def show_topology(host: str):
    """``GET /v1/topology/<host>``: the stored report with ``reported_at``; 404 if none."""
    try:
        document = reports.show(current_app.extensions["cortex"].engine, host)
    except reports.DatabaseUnreachable as exc:
        raise ApiError(503, f"database unreachable: {exc}") from None
    if document is None:
        raise ApiError(404, f"no topology report from host {host}")
    document["reported_at"] = document["reported_at"].isoformat()
    return jsonify(document)
