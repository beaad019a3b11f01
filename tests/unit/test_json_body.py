"""The request body parser's orjson path reads exactly what the standard library reads."""

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cortex.api.body import _UNSURE, _unique_keys, parse_exactly
from tests.conftest import REPO

REFUSED = object()


def strict(data: bytes):
    """The standard library with the endpoint's duplicate-key refusal; REFUSED when refused."""
    try:
        return json.loads(data, object_pairs_hook=_unique_keys)
    except ValueError:
        return REFUSED


BODIES = sorted((REPO / "tests" / "fixtures").glob("[ncm]*/*.json"))


@pytest.mark.parametrize("path", BODIES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_callers_bodies_take_the_fast_path_and_read_the_same(path: Path):
    data = path.read_bytes()
    assert parse_exactly(data) == json.loads(data)
    assert parse_exactly(data) is not _UNSURE


@pytest.mark.parametrize("data", [
    b'{"spec": {}, "spec": {}}',
    b'{"a": {"b": "x:y", "b": "z"}}',
    b'[{"k": 1}, {"k": 1, "k": 1}]',
    b'{"a\\u003a": 1, "a": 2, "a": 3}',  # a colon hidden to balance the dropped key
    b'{"a": "\\u003A", "b": 1, "b": 2}',
    b'{"n": 123456789012345678901}',  # orjson would read a float
    b'[1,-99999999999999999999999]',
    b'{"s": "x:12345678901234567890", "n": 1, "n": 2}',
    b'{"n": 1e999}',
    b'{"n": NaN}',
    b'"\\ud800"',
    '{"a": 1}'.encode("utf-16"),
])
def test_what_orjson_would_read_otherwise_goes_to_the_standard_library(data):
    assert parse_exactly(data) is _UNSURE


@pytest.mark.parametrize("data", [
    b'{"project": "0f0e0d0c0b0a49988776655443322110"}',
    b'{"f": 0.123456789012345678901234}',
    b'[2.5e00000000000000000000001]',
])
def test_long_digit_runs_where_no_integer_starts_keep_the_fast_path(data):
    assert parse_exactly(data) == json.loads(data)


KEYS = st.sampled_from(["a", "b", "host", "x:y", ":", "é", "\\", '"'])
SCALARS = st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.integers(-10**30, 10**30) | \
    st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=6)


def _objects(children):
    """An object as ``(key, value)`` pairs, keys possibly repeated."""
    return st.lists(st.tuples(KEYS, children), max_size=5).map(lambda p: ("obj", p))


DOCUMENTS = st.recursive(SCALARS, lambda c: st.lists(c, max_size=4) | _objects(c), max_leaves=20)


def _text(doc, hide_colons: bool) -> str:
    """JSON text of a document whose objects are pair lists (keys may repeat)."""
    if isinstance(doc, tuple):
        return "{" + ",".join(f"{_text(k, hide_colons)}:{_text(v, hide_colons)}"
                              for k, v in doc[1]) + "}"
    if isinstance(doc, list):
        return "[" + ",".join(_text(v, hide_colons) for v in doc) + "]"
    text = json.dumps(doc)
    return text.replace(":", "\\u003a") if hide_colons and isinstance(doc, str) else text


@settings(max_examples=400, deadline=None, derandomize=True)
@given(DOCUMENTS, st.booleans())
def test_the_fast_path_never_reads_a_document_differently(doc, hide_colons):
    data = _text(doc, hide_colons).encode()
    fast = parse_exactly(data)
    if fast is not _UNSURE:
        expected = strict(data)
        assert expected is not REFUSED, "a repeated key got through"
        assert fast == expected and json.dumps(fast) == json.dumps(expected)
