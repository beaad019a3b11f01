"""The weights a call's decision holds as two columns (cortex.decision.HostWeights)."""

from types import MappingProxyType

import pytest

from cortex.decision import Decision, HostWeights, in_order

HOSTS = ("a", "b", "c")


def test_host_weights_read_as_the_dict_of_their_columns():
    weights = HostWeights(HOSTS, (0.5, 2.0, -1.0))
    expected = {"a": 0.5, "b": 2.0, "c": -1.0}
    assert weights == expected and expected == weights
    assert list(weights) == ["a", "b", "c"] and len(weights) == 3
    assert weights["b"] == 2.0 and weights.get("x") is None and "c" in weights
    assert dict(weights.items()) == expected and list(weights.values()) == [0.5, 2.0, -1.0]
    assert MappingProxyType(expected) == weights
    with pytest.raises(KeyError):
        weights["x"]


def test_host_weights_refuse_columns_of_other_lengths():
    with pytest.raises(ValueError, match="2 weights for 3 hosts"):
        HostWeights(HOSTS, (1.0, 2.0))


def test_in_order_only_where_the_columns_follow_the_hosts():
    assert in_order(HostWeights(HOSTS, (1.0, 2.0, 3.0)), HOSTS) == [1.0, 2.0, 3.0]
    assert in_order(HostWeights(list(HOSTS), (1.0, 2.0, 3.0)), list(HOSTS)) == [1.0, 2.0, 3.0]
    assert in_order(HostWeights(("b", "a", "c"), (1.0, 2.0, 3.0)), HOSTS) is None
    assert in_order({"a": 1.0, "b": 2.0, "c": 3.0}, HOSTS) == [1.0, 2.0, 3.0]
    assert in_order({"b": 2.0, "a": 1.0, "c": 3.0}, HOSTS) is None
    assert in_order({"a": 1.0, "b": 2.0}, HOSTS) is None


@pytest.mark.parametrize("values", [(0.5, 2.0, 2.0), (2.0, 2.0, 0.5), (-3.0, -1.0, -2.0)])
def test_the_callers_first_choice_is_the_same_from_columns_and_from_a_map(values):
    columns = Decision(service="nova", hosts=HOSTS, weights=HostWeights(HOSTS, values))
    mapped = Decision(service="nova", hosts=HOSTS,
                      weights=MappingProxyType(dict(zip(HOSTS, values, strict=True))))
    assert columns.caller_first() == mapped.caller_first()
    assert columns.caller_first() == HOSTS[values.index(max(values))]


def test_a_record_lists_the_weights_of_columns_in_the_hosts_order():
    decision = Decision(service="nova", hosts=HOSTS, weights=HostWeights(HOSTS, (1.0, 2.0, 3.0)),
                        result=("b",), final_weights=HostWeights(("b",), (0.7,)))
    record = decision.as_record()
    assert record["weights"] == [1.0, 2.0, 3.0]
    assert Decision.from_record(record).weights == decision.weights
    assert decision.as_document()["final_weights"] == {"b": 0.7}
