"""The final weights and the ranking are the floats and the order of the sum made host by host.

:func:`cortex.decision.final_weight_array` sums over numpy arrays and the engine ranks
with ``numpy.lexsort``; the rule is the one-host-at-a-time sum of the module docstring
of :mod:`cortex.decision` and a stable sort by (final weight, caller weight), highest
first. These tests hold them to that reference bit for bit, ties included.
"""

import math
import operator
import random

import pytest

from cortex.decision import StepResult, final_weights, nova_normalize
from cortex.pipeline.config import build_pipelines
from cortex.pipeline.engine import run_pipeline
from cortex.plugins.base import Weigher
from cortex.plugins.registry import register
from tests.fakes import host, inventory, nova, view


def reference(caller, steps, weighing):
    """The sum made one host at a time, terms in pipeline order."""
    sums = []
    for i, weight in enumerate(caller):
        total = math.tanh(weight) if weighing == "cortex" else 0.0
        for step in steps:
            if step.normalize is None:
                term = step.factor * math.tanh(step.values[i])
            else:
                term = step.factor * nova_normalize(step.values, *step.normalize)[i]
            total = total + term
        sums.append(total)
    return sums


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("weighing", ["cortex", "nova"])
def test_final_weights_are_the_host_by_host_sum_bit_for_bit(seed, weighing):
    rng = random.Random(seed)
    count = rng.randint(0, 300)
    caller = [rng.choice([0.0, -0.0, 1.5, rng.uniform(-9, 9)]) for _ in range(count)]
    steps = []
    for i in range(rng.randint(0, 7)):
        values = tuple(rng.choice([0.0, 1.0, rng.uniform(-40, 40), rng.gauss(0, 1e-9)])
                       for _ in range(count))
        bounds = (None, None) if weighing == "nova" else None
        steps.append(StepResult(f"w{i}", "weigher", "ran", multiplier=rng.choice(
            [1.0, -1.0, 0.37, 1e6]), weighed=tuple(range(count)), values=values,
            normalize=bounds))
    got = final_weights(caller, steps, weighing)
    assert type(got) is list and all(type(v) is float for v in got)
    assert [v.hex() for v in got] == [v.hex() for v in reference(caller, steps, weighing)]


def test_unequal_lengths_are_refused():
    step = StepResult("w", "weigher", "ran", weighed=("a",), values=(1.0,))
    with pytest.raises(ValueError, match="1 values for 2 hosts"):
        final_weights([0.0, 0.0], [step])


@register
class CoarseWeigher(Weigher):
    """Weighs a host by the digit its name ends with, in a few coarse steps: many ties."""

    name = "test_coarse_weigher"

    def weigh(self, host, request, candidate):
        return float(int(candidate.host[-1]) % 3)


@pytest.mark.parametrize("seed", range(4))
def test_the_ranking_is_a_stable_sort_by_final_then_caller_weight(seed):
    rng = random.Random(seed)
    names = [f"h{i:03d}" for i in range(120)]
    fleet = view(*[host(n, inventories={"VCPU": inventory(64)}) for n in names])
    offered = rng.sample(names, len(names))
    weights = {n: rng.choice([0.0, -0.0, 1.0, 2.0]) for n in offered}
    spec = {"service": "nova", "filters": [],
            "weighers": [{"name": "test_coarse_weigher", "multiplier": 1.0, "options": {}}]}
    pipeline = build_pipelines({"defaults": {"nova": "p"}, "pipelines": {"p": spec}}
                               ).pipelines["p"]
    result = run_pipeline(pipeline, nova(hosts=offered, weights=weights), fleet)
    final = [result.weights[n] for n in offered]
    keys = list(zip(map(operator.neg, final), (-weights[n] for n in offered), strict=True))
    expected = [offered[i] for i in sorted(range(len(offered)), key=keys.__getitem__)]
    assert result.hosts == expected
    assert len(set(final)) < len(final) / 4            # ties were there to break
