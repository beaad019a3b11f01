"""Explanations of decision records: removals, margins, deciding terms, counterfactuals."""

import math

import pytest

from cortex.decision import Decision
from cortex.pipeline import explain as explaining
from cortex.pipeline.explain import render_text


def explain(document):
    """The explanation of a decision document."""
    return explaining.explain(Decision.from_document(document))


def caller_first(document):
    return Decision.from_document(document).caller_first()


def rerank(document, without):
    found = Decision.from_document(document)
    step = next(s for s in found.steps if s.name == without)
    return explaining.rerank(found, step.scaled)


def counterfactuals(document):
    return explaining.counterfactuals(Decision.from_document(document))


def decision(weights, weighers=(), removed=None, shadow=None, result=None, **extra):
    """A decision record as the API writes it, computed with the engine's formula.

    ``weights``: caller weights in caller order; ``weighers``: ``[(name, multiplier,
    {host: raw})]``; ``removed``: ``{host: reason}`` of one filter ``f_capacity``.
    """
    hosts = list(weights)
    removed = removed or {}
    alive = [h for h in hosts if h not in removed]
    steps = [{"name": "f_capacity", "kind": "filter", "status": "ran", "hosts_in": len(hosts),
              "removed": removed}]
    if shadow:
        steps.append({"name": "f_shadow", "kind": "filter", "status": "ran", "shadow": True,
                      "hosts_in": len(alive), "removed": shadow})
    final = {h: math.tanh(weights[h]) for h in alive}
    for name, multiplier, raw in weighers:
        scaled = {h: multiplier * math.tanh(raw.get(h, 0.0)) for h in alive}
        for h in alive:
            final[h] += scaled[h]
        steps.append({"name": name, "kind": "weigher", "status": "ran", "multiplier": multiplier,
                      "hosts_in": len(alive), "raw": {h: raw.get(h, 0.0) for h in alive},
                      "scaled": scaled})
    order = {h: i for i, h in enumerate(hosts)}
    if result is None:
        result = sorted(alive, key=lambda h: (-final[h], -weights[h], order[h]))
    return {"id": "d-1", "service": "nova", "pipeline": "p", "intent": "create", "status": 200,
            "outcome": "ok", "hosts": hosts, "weights": weights, "steps": steps,
            "result": result, "final_weights": final, "unknown_hosts": [], **extra}


# (weights, weighers, winner, runner-up, deciding term, {weigher: first without it})
CASES = [
    pytest.param({"a": 1.0, "b": 0.5}, [("w_ram", 1.0, {"b": 1.0}), ("w_gpu", 2.0, {"a": 1.0})],
                 "a", "b", "w_gpu", {"w_ram": "a", "w_gpu": "b"}, id="one-weigher-decides"),
    pytest.param({"a": 0.0, "b": 0.9}, [("w_ram", 1.0, {"a": 3.0})],
                 "a", "b", "w_ram", {"w_ram": "b"}, id="weigher-overrides-caller"),
    pytest.param({"a": 0.9, "b": 0.0}, [("w_ram", 1.0, {"b": 0.1})],
                 "a", "b", "caller", {"w_ram": "a"}, id="caller-weight-decides"),
    pytest.param({"a": 0.0, "b": 0.0}, [("w_ram", 1.0, {"a": 1.0}), ("w_cpu", -1.0, {"a": 0.5})],
                 "a", "b", "w_ram", {"w_ram": "b", "w_cpu": "a"}, id="negative-multiplier"),
    pytest.param({"a": 0.0, "b": 0.0}, [("w_ram", 1.0, {})],
                 "a", "b", "tie-break", {"w_ram": "a"}, id="tie-broken-by-caller-order"),
    pytest.param({"a": 0.2, "b": 0.7}, [],
                 "b", "a", "caller", {}, id="no-weighers-caller-order-stands"),
]


@pytest.mark.parametrize("weights, weighers, winner, runner_up, term, without", CASES)
def test_margin_deciding_term_and_counterfactuals(weights, weighers, winner, runner_up, term,
                                                  without):
    record = decision(weights, weighers)
    explained = explain(record)
    assert (explained["winner"], explained["runner_up"]) == (winner, runner_up)
    assert explained["decided_by"]["term"] == term
    finals = record["final_weights"]
    assert explained["margin"] == pytest.approx(finals[winner] - finals[runner_up])
    assert sum(d["difference"] for d in explained["differences"]) == pytest.approx(
        explained["margin"])
    assert {c["without"]: c["first"] for c in explained["counterfactuals"]} == without
    for c in explained["counterfactuals"]:
        assert c["changed"] == (c["first"] != winner)


def test_decisive_means_the_runner_up_would_otherwise_lead():
    explained = explain(decision({"a": 0.0, "b": 0.5}, [("w_ram", 1.0, {"a": 2.0})]))
    assert explained["decided_by"] == {"term": "w_ram", "difference": pytest.approx(
        math.tanh(2.0)), "decisive": True}
    mild = explain(decision({"a": 1.0, "b": 0.0}, [("w_ram", 1.0, {"a": 0.2})]))
    assert mild["decided_by"]["term"] == "caller" and mild["decided_by"]["decisive"] is False


def test_tie_broken_by_caller_weight_is_named():
    record = decision({"a": 0.3, "b": 0.1}, [("w", 1.0, {"b": 0.0})])
    record["final_weights"] = {"a": 1.0, "b": 1.0}  # a tie by construction
    record["result"] = ["a", "b"]
    assert explain(record)["decided_by"]["how"] == "higher caller weight"


def test_ranking_splits_final_weight_into_caller_and_weighers():
    record = decision({"a": 0.5, "b": 0.1, "c": 0.0}, [("w_ram", 2.0, {"a": 0.1, "b": 1.0})])
    for row in explain(record)["ranking"]:
        scaled = sum(w["scaled"] for w in row["weighers"].values())
        assert row["caller"]["term"] + scaled == pytest.approx(row["final"])
        assert row["caller"]["term"] == pytest.approx(math.tanh(record["weights"][row["host"]]))
        assert row["weighers"]["w_ram"]["raw"] == record["steps"][1]["raw"][row["host"]]
    assert [r["host"] for r in explain(record)["ranking"]] == record["result"]


def test_removals_with_reasons_and_shadow_filters_apart():
    record = decision({"a": 0.1, "b": 0.2, "c": 0.3}, [("w", 1.0, {"a": 1.0})],
                      removed={"c": "no PCPU inventory"}, shadow={"a": "would not fit"})
    explained = explain(record)
    assert explained["removed"] == [{"host": "c", "step": "f_capacity",
                                     "reason": "no PCPU inventory"}]
    assert explained["would_remove"] == [{"host": "a", "step": "f_shadow",
                                          "reason": "would not fit"}]
    assert "c" not in {r["host"] for r in explained["ranking"]}
    text = render_text(explained)
    assert "c  f_capacity: no PCPU inventory" in text
    assert "Shadow filters would remove" in text and "a  f_shadow: would not fit" in text


def test_first_choice_kept_or_changed():
    kept = decision({"a": 0.9, "b": 0.1}, [("w", 1.0, {"b": 0.1})])
    assert caller_first(kept) == "a" and explain(kept)["first_choice"] == "kept"
    changed = decision({"a": 0.9, "b": 0.1}, [("w", 1.0, {"b": 5.0})])
    assert explain(changed)["first_choice"] == "changed"
    emptied = decision({"a": 0.9}, [], removed={"a": "full"})
    assert explain(emptied)["first_choice"] == "changed"
    assert "no valid host: filters removed all 1 candidates" in explain(emptied)["summary"]


def test_unknown_hosts_kept_after_judged_ones_are_not_ranked():
    record = decision({"a": 0.1, "b": 0.2}, [("w", 1.0, {"a": 3.0})])
    record["hosts"].append("zz")
    record["weights"]["zz"] = 1.0
    record["result"] = record["result"] + ["zz"]
    record["unknown_hosts"] = ["zz"]
    explained = explain(record)
    assert [r["host"] for r in explained["ranking"]] == ["a", "b"]
    assert explained["winner"] == "a" and explained["caller_first"] == "zz"
    assert "1 hosts unknown to Cortex: zz" in render_text(explained)


def test_failed_call_is_explained_without_a_ranking():
    record = {"id": "d-2", "service": "nova", "status": 503, "outcome": "error",
              "detail": "step f failed: RuntimeError: boom", "hosts": ["a"],
              "weights": {"a": 0.0}, "result": None}
    explained = explain(record)
    assert explained["ranking"] == [] and explained["margin"] is None
    assert "answered 503" in explained["summary"] and "boom" in explained["summary"]
    assert explained["first_choice"] is None
    assert "answered 503" in render_text(explained)


def test_skipped_and_failed_weighers_do_not_count():
    record = decision({"a": 0.0, "b": 0.1}, [("w", 1.0, {"a": 1.0})])
    record["steps"].append({"name": "w_broken", "kind": "weigher", "status": "error",
                            "reason": "ValueError('x')", "multiplier": 5.0})
    explained = explain(record)
    assert [w["step"] for w in explained["weighers"]] == ["w"]
    assert "error, ValueError('x'): w_broken" in render_text(explained)


def test_rerank_keeps_ties_the_engine_saw_despite_float_noise():
    record = decision({"a": 0.0, "b": 0.0}, [("w1", 0.1, {"a": 0.3, "b": 0.3}),
                                              ("w2", 0.7, {"a": 0.2, "b": 0.2})])
    assert rerank(record, "w1") == ["a", "b"] == rerank(record, "w2")
    assert counterfactuals(record) == [
        {"without": "w1", "first": "a", "changed": False, "top": ["a", "b"]},
        {"without": "w2", "first": "a", "changed": False, "top": ["a", "b"]}]


def test_text_lists_weighers_ranking_margin_and_counterfactuals():
    record = decision({"a": 1.0, "b": 0.5, "c": 0.0},
                      [("w_ram", 1.0, {"b": 1.0}), ("w_gpu", 2.0, {"a": 1.0})])
    text = render_text(explain(record), max_hosts=2)
    assert "w2 = w_gpu (multiplier 2)" in text
    assert "decided by w_gpu (without it the runner-up would be ahead)" in text
    assert "without w_gpu, b would have been first" in text
    assert "without w_ram, a would still be first" in text
    assert "... and 1 more judged hosts" in text
    lines = text.splitlines()
    row = next(line for line in lines if line.strip().startswith("1  a"))
    assert "+1.5232 (1)" in row  # w_gpu: 2 * tanh(1), raw 1


def test_the_callers_first_choice_is_its_earliest_heaviest_host():
    from types import MappingProxyType

    from cortex.decision import Decision

    def first(hosts, weights):
        return Decision(service="nova", hosts=tuple(hosts),
                        weights=MappingProxyType(weights)).caller_first()

    assert first(["a", "b", "c"], {"a": 0.5, "b": 2.0, "c": 2.0}) == "b"   # a tie: earlier
    assert first(["c", "b"], {"b": 2.0, "c": 2.0}) == "c"
    assert first(["a", "b"], {"b": -1.0}) == "a"                            # missing: 0
    assert first([], {}) is None
