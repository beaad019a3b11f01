"""Pipelines that weigh as Nova does (``weighing: nova``, cortex.decision.nova_normalize)."""

import math

import pytest

from cortex.decision import Decision, final_weights, nova_normalize
from cortex.pipeline.config import PipelineConfigError, build_pipelines
from cortex.pipeline.engine import run_pipeline
from cortex.pipeline.explain import explain, render_text
from tests.fakes import host, inventory, nova, view

HOSTS = ["a", "b", "c"]


@pytest.mark.parametrize("values, bounds, expected", [
    ([2.0, 4.0, 6.0], (None, None), [0.0, 0.5, 1.0]),
    ([2.0, 4.0, 6.0], (0.0, None), [1 / 3, 2 / 3, 1.0]),   # minval 0: (w - 0) / (6 - 0)
    ([-2.0, 4.0, 8.0], (0.0, None), [0.0, 0.5, 1.0]),      # clamped to minval first
    ([5.0, 5.0, 5.0], (None, None), [0.0, 0.0, 0.0]),      # all equal: 0, as Nova says
    ([0.0, 0.0], (0.0, None), [0.0, 0.0]),
    ([1.0, 3.0], (None, 2.0), [0.0, 1.0]),                 # maxval: clamped, then the top
])
def test_normalize_as_nova_does(values, bounds, expected):
    assert nova_normalize(values, *bounds) == pytest.approx(expected)


def pipeline(weighing: str, multiplier: float = 2.0):
    spec = {"service": "nova", "weighing": weighing, "weighers": [
        {"name": "weigher_ram", "multiplier": multiplier, "options": {"measure": "free_mb"}},
        {"name": "weigher_io_ops", "multiplier": -1.0}]}
    return build_pipelines({"defaults": {"nova": "p"}, "pipelines": {"p": spec}}).pipelines["p"]


def fleet():
    return view(*(host(h, inventories={"MEMORY_MB": inventory(1000, used=used, reserved=100)})
                  for h, used in zip(HOSTS, (100, 500, 1200), strict=True)))


def test_nova_weighing_normalises_each_weigher_and_leaves_the_caller_out():
    request = nova(hosts=HOSTS, weights={"a": -50.0, "b": 0.0, "c": 50.0})
    result = run_pipeline(pipeline("nova"), request, fleet())
    ram = next(s for s in result.steps if s.name == "weigher_ram")
    assert ram.values == [800.0, 400.0, -300.0]     # Nova's free_ram_mb
    assert ram.normalize == (0.0, None)
    # clamped at 0, normalised by the greatest (800), times 2; io_ops all 0 adds nothing
    assert result.weights == pytest.approx({"a": 2.0, "b": 1.0, "c": 0.0})
    assert result.hosts == ["a", "b", "c"]          # the caller preferred c: not counted
    cortex = run_pipeline(pipeline("cortex"), request, fleet())
    assert cortex.weights["c"] == pytest.approx(math.tanh(50.0) + 2 * math.tanh(-300.0))


def test_a_decision_of_nova_weighing_reads_back_the_same():
    request = nova(hosts=HOSTS, weights=dict.fromkeys(HOSTS, 0.0))
    result = run_pipeline(pipeline("nova"), request, fleet())
    decision = Decision("nova", hosts=tuple(HOSTS), weights={h: 0.0 for h in HOSTS},
                        pipeline="p", result=tuple(result.hosts), steps=tuple(result.steps),
                        weighed=tuple(result.weighed), final_weights=result.weights,
                        weighing=result.weighing, status=200, outcome="ok")
    record = decision.as_record()
    assert record["weighing"] == "nova"
    back = Decision.from_record(record)
    assert back.weighing == "nova" and dict(back.final_weights) == pytest.approx(result.weights)
    ram = next(s for s in back.steps if s.name == "weigher_ram")
    assert ram.normalize == (0.0, None) and ram.scaled == pytest.approx(
        {"a": 2.0, "b": 1.0, "c": 0.0})
    assert final_weights([0.0] * 3, back.weighers, "nova") == pytest.approx([2.0, 1.0, 0.0])
    explanation = explain(back)
    assert explanation["weighing"] == "nova"
    assert all(row["caller"]["term"] == pytest.approx(0.0) for row in explanation["ranking"])
    assert "as Nova weighs" in render_text(explanation)


def test_an_unknown_weighing_is_refused_at_load():
    with pytest.raises(PipelineConfigError, match="weighing"):
        pipeline("tanh")
    with pytest.raises(ValueError, match="weighing 'tanh'"):
        Decision.from_record({"service": "nova", "weighing": "tanh"})


@pytest.mark.parametrize("weigher, nova_measure, other", [
    ("weigher_ram", "free_mb", "free_vcpus"), ("weigher_disk", "free_mb", "free_vcpus"),
    ("weigher_cpu", "free_vcpus", "free_mb"), ("weigher_build_failures", "failures", "free_mb")])
def test_each_weigher_takes_its_own_nova_measure_only(weigher, nova_measure, other):
    def build(measure):
        spec = {"service": "nova", "weighers": [{"name": weigher,
                                                 "options": {"measure": measure}}]}
        return build_pipelines({"defaults": {"nova": "p"}, "pipelines": {"p": spec}})

    assert build(nova_measure)
    with pytest.raises(PipelineConfigError, match="measure must be one of"):
        build(other)
