"""weigher_metrics: the weighted sum of the host's metrics."""

import pytest

from cortex.plugins.weighers.metrics import MetricsWeigher, MetricUnavailable
from tests.fakes import host, nova
from tests.unit.plugins.weighers.weighing import make, weight


@pytest.mark.parametrize("features, options, expected", [
    ({"cpu.busy": 0.25}, {"metrics": {"cpu.busy": -1.0}}, -0.25),
    ({"cpu.busy": 0.5, "memory.active": 0.5},
     {"metrics": {"cpu.busy": -1.0, "memory.active": -0.5}}, -0.75),
    ({}, {"metrics": {"cpu.busy": -1.0}}, -1.0),                 # weight_of_unavailable
    ({}, {"metrics": {"cpu.busy": -1.0}, "weight_of_unavailable": 0.0}, 0.0),
])
def test_metrics(features, options, expected):
    state = host("h", features=features)
    assert weight(make(MetricsWeigher, **options), state, nova()) == expected


def test_metrics_required_raises_and_empty_does_not_run():
    plugin = make(MetricsWeigher, metrics={"cpu.busy": 1.0}, required=True)
    with pytest.raises(MetricUnavailable):
        weight(plugin, host("h"), nova())
    assert not MetricsWeigher().applies(nova())
