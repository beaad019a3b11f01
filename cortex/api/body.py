"""Request bodies as JSON documents, read once the BodyGuard let them in."""

from __future__ import annotations

import json
from typing import Any

from flask import request

from cortex.api.errors import ApiError


def _reject_constant(name: str) -> float:
    """json.loads hook: NaN and Infinity are not JSON."""
    raise ValueError(f"{name} is not valid JSON")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json.loads hook: an object with a repeated key is ambiguous, so it is refused."""
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        repeated = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"duplicate key {repeated!r}")
    return result


def read_json_body() -> Any:
    """The request's JSON document; ApiError 415/400 as the contract says.

    The body's size (413) and arrival time (408) were settled before the app saw the
    request, by :class:`cortex.api.guard.BodyGuard`, chunked bodies included.
    """
    if request.mimetype != "application/json" and not request.mimetype.endswith("+json"):
        raise ApiError(415, f"Content-Type must be application/json, not {request.mimetype!r}")
    data = request.get_data(cache=False)
    try:
        return json.loads(data, parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
    except (ValueError, RecursionError) as exc:
        raise ApiError(400, f"body is not JSON: {str(exc)[:200]}") from None
