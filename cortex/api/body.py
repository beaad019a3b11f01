"""Request bodies as JSON documents, read once the BodyGuard let them in."""

from __future__ import annotations

import json
import sys
from typing import Any

from flask import g, request

from cortex.api.errors import ApiError
from cortex.jsontext import count_colons, may_hold_big_integer, may_hold_unnamable

try:  # the ``fast`` extra
    import orjson
except ImportError:  # pragma: no cover - exercised where orjson is not installed
    orjson = None

_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


def query_flag(name: str, text: str) -> bool:
    """A boolean query value (``true``/``1``/``yes`` or ``false``/``0``/``no``).

    ApiError 400 naming ``name`` for anything else.
    """
    if text.lower() in _TRUE + _FALSE:
        return text.lower() in _TRUE
    raise ApiError(400, f"{name} must be true or false, not {text[:40]!r}")


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


#: Magnitude bits of the largest integer a double holds (``2**1024`` ~ ``1.8e308``).
_MAX_INT_BITS = sys.float_info.max_exp
_UNSURE = object()  # parse_exactly could not be sure


def parse_exactly(data: bytes) -> Any:
    r"""The document in ``data`` read by orjson, when it reads what ``json.loads`` would.

    Else a sentinel, and the caller parses with the standard library and its checks.
    orjson is ~5x faster but keeps the last of repeated keys, and reads an integer beyond
    64 bits as a float. So it is used only when neither can happen. No run of 19 digits
    stands where a number can start (:func:`cortex.jsontext.may_hold_big_integer`). And
    the document orjson writes back holds as many colons as the body: a key's colon is
    the only colon outside strings and orjson writes every colon inside a string as it
    is, so the counts match exactly when no key was dropped, unless the body hides a
    colon as ``:`` (then the sentinel). What orjson refuses (NaN, an infinity, a lone
    surrogate, UTF-16) goes to the standard library too, which words the refusal. Every
    number orjson accepts is finite.
    """
    # the backslash first: one byte is found ~30x faster than the escape
    if orjson is None or b"\\" in data and b"\\u003" in data or may_hold_big_integer(data):
        return _UNSURE
    try:
        body = orjson.loads(data)
        if count_colons(orjson.dumps(body)) == count_colons(data):
            return body
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        pass
    return _UNSURE


def read_json_body() -> Any:
    """The request's JSON document; ApiError 415/400 as the contract says.

    The body's size (413) and arrival time (408) were settled before the app saw the
    request, by :class:`cortex.api.guard.BodyGuard`, chunked bodies included. Every
    number is looked at as it is parsed: ``g.finite_numbers`` says that none is beyond a
    double's range (``1e999``, an integer of 2**1024 or more), which spares the schema
    check a walk over the whole document; ``g.plain_names`` that no string can hold a
    control character or a lone surrogate (:func:`cortex.jsontext.may_hold_unnamable`),
    which spares it the names' pattern (:meth:`cortex.api.schema.RequestValidator.errors`).
    """
    if request.mimetype != "application/json" and not request.mimetype.endswith("+json"):
        raise ApiError(415, f"Content-Type must be application/json, not {request.mimetype!r}")
    data = request.get_data(cache=False)
    g.plain_names = not may_hold_unnamable(data)
    body = parse_exactly(data)
    if body is not _UNSURE:
        g.finite_numbers = True
        return body
    finite = [True]

    def parse_float(text: str) -> float:
        value = float(text)
        if value - value != 0.0:  # inf - inf is nan
            finite[0] = False
        return value

    def parse_int(text: str) -> int:
        value = int(text)
        if len(text) > 300 and value.bit_length() > _MAX_INT_BITS:
            finite[0] = False
        return value

    try:
        body = json.loads(data, parse_constant=_reject_constant, object_pairs_hook=_unique_keys,
                          parse_float=parse_float, parse_int=parse_int)
    except (ValueError, RecursionError) as exc:
        raise ApiError(400, f"body is not JSON: {str(exc)[:200]}") from None
    g.finite_numbers = finite[0]
    return body
