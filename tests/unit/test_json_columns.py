"""JSON columns: orjson's text reads back as the standard library's, and what it refuses is
still written."""

import json

import pytest

from cortex.db.engine import dumps_json


@pytest.mark.parametrize("value", [
    {"steps": [{"raw": {"cmp0001": 0.1 + 0.2, "cmp0002": -1e-300}, "removed": {}}]},
    {"hosts": ["é", "\u2028", ""], "n": None, "ok": True, "t": (1, 2)},
    {1: "int key", "nested": {"a": [1.5, 2, 3e20]}},
])
def test_reads_back_as_the_standard_library_writes(value):
    assert json.loads(dumps_json(value)) == json.loads(json.dumps(value))


def test_what_orjson_refuses_the_standard_library_writes():
    huge = 2**70  # beyond orjson's 64-bit integers
    assert json.loads(dumps_json({"n": huge})) == {"n": huge}


def test_utf8_only_refuses_a_lone_surrogate_and_writes_the_rest():
    assert json.loads(dumps_json({"h": "a\ud800"})) == {"h": "a\ud800"}  # an escape
    with pytest.raises(ValueError):
        dumps_json({"h": "a\ud800"}, utf8_only=True)
    huge = 2**70
    assert json.loads(dumps_json({"n": huge, "x": "\x00é"}, utf8_only=True)) == {
        "n": huge, "x": "\x00é"}
