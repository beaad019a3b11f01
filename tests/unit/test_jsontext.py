"""The one check every orjson reader asks first (cortex.jsontext)."""

import json

import orjson
import pytest

from cortex.jsontext import count_colons, may_hold_big_integer, may_hold_unnamable


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


def _control(character: str) -> bool:
    """C0, DEL or C1."""
    return ord(character) < 0x20 or 0x7F <= ord(character) <= 0x9F


def test_no_text_said_plain_names_decodes_to_a_control_character():
    # every code point of the BMP but surrogates, raw in UTF-8 as a key and as a value
    for point in (*range(0xD800), *range(0xE000, 0x10000)):
        character = chr(point)
        text = json.dumps({f"k{character}": f"v{character}"}, ensure_ascii=False).encode()
        if not may_hold_unnamable(text):
            assert not _control(character), hex(point)


@pytest.mark.parametrize("character", ["\x00", "\n", "\x1b", "\x7f", "\x85", "\x9f",
                                       "\ud800", "\udfff"])
@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "utf-16-le", "utf-32"])
@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_texts_with_a_control_character_or_a_surrogate_are_flagged(character, encoding,
                                                                    ensure_ascii):
    text = json.dumps({"host": f"cmp{character}1"}, ensure_ascii=ensure_ascii).encode(
        encoding, "surrogatepass")
    assert json.loads(text) == {"host": f"cmp{character}1"}
    assert may_hold_unnamable(text)


def test_plain_texts_are_not_flagged():
    text = json.dumps({"hosts": [{"host": "cmp1", "hypervisor_hostname": "cmp1.example"}],
                       "name": "h\u00e9llo \u4e16\u754c"}, ensure_ascii=False).encode()
    assert not may_hold_unnamable(text)


@pytest.mark.parametrize("data", [b"", b":", b'{"a": ":", "b": 1}', ":\u00e9:".encode() * 1000])
def test_count_colons_counts_as_bytes_count_does(data):
    assert count_colons(data) == data.count(b":")
