"""weigher_contention: minus the host's bounded CPU contention."""

import math

import pytest

from cortex.plugins.weighers.contention import ContentionWeigher
from tests.fakes import host, nova
from tests.unit.plugins.weighers.weighing import make, weight


@pytest.mark.parametrize("steal, expected", [
    (None, 0.0), (0.01, 0.0), (0.06, -0.5), (0.1, -1.0), (0.5, -1.0),
])
def test_contention(steal, expected):
    features = {} if steal is None else {"cpu.steal": steal}
    plugin = make(ContentionWeigher, lower_bound=0.02, upper_bound=0.1)
    assert math.isclose(weight(plugin, host("h", features=features), nova()), expected)


def test_contention_reads_the_named_feature():
    plugin = make(ContentionWeigher, feature="cpu.contention", lower_bound=0.0, upper_bound=1.0)
    state = host("h", features={"cpu.contention": 0.3, "cpu.steal": 0.9})
    assert weight(plugin, state, nova()) == -0.3
