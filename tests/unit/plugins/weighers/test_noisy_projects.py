"""weigher_noisy_projects: minus the bounded busyness of the request's project."""

import math

import pytest

from cortex.plugins.weighers.noisy_projects import NoisyProjectsWeigher
from tests.fakes import host, instance, nova
from tests.unit.plugins.weighers.weighing import make, weight


@pytest.mark.parametrize("instances, expected", [
    ((), 0.0),
    ((instance("a", "other", busy=1.0),), 0.0),                      # another project
    ((instance("a", "me", busy=0.3),), 0.0),                         # quiet
    ((instance("a", "me", busy=0.9), instance("b", "me", busy=0.5)), -0.5),
    ((instance("a", "me", busy=1.0),), -1.0),
])
def test_noisy_projects(instances, expected):
    state = host("h", instances=instances)
    plugin = make(NoisyProjectsWeigher, lower_bound=0.5, upper_bound=0.9)
    assert math.isclose(weight(plugin, state, nova(spec={"project_id": "me"})), expected)
