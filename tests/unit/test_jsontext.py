"""The one check every orjson reader asks first (cortex.jsontext)."""

import json

import orjson
import pytest

from cortex.jsontext import may_hold_big_integer


@pytest.mark.parametrize("text", [
    '{"n": -9999999999999999999}',   # 19 digits, below -2**63: orjson reads a float
    '{"n": 18446744073709551616}',   # 2**64
    '[1,-99999999999999999999999]',
    '1234567890123456789012',        # the text's start
])
def test_texts_orjson_reads_otherwise_are_flagged_as_bytes_and_as_str(text):
    assert repr(orjson.loads(text)) != repr(json.loads(text))
    assert may_hold_big_integer(text) and may_hold_big_integer(text.encode())


@pytest.mark.parametrize("text", [
    '{"n": 922337203685477580, "m": -922337203685477580}',   # 18 digits
    '{"project": "0f0e0d0c0b0a49988776655443322110"}',       # a hex id
    '{"f": 0.123456789012345678901234}',                      # a float's digits
])
def test_texts_orjson_reads_alike_are_not(text):
    assert repr(orjson.loads(text)) == repr(json.loads(text))
    assert not may_hold_big_integer(text) and not may_hold_big_integer(text.encode())
