"""weigher_pool_utilization: minus the pool's bounded utilization."""

import logging
import math

import pytest

from cortex.plugins.base import build_options
from cortex.plugins.weighers.pool_utilization import PoolUtilizationWeigher
from tests.fakes import pool
from tests.unit.plugins.storage import typed


@pytest.mark.parametrize("features, expected", [
    ({}, 0.0), ({"pool.utilization": 0.3}, 0.0), ({"pool.utilization": 0.7}, -0.5),
    ({"pool.utilization": 0.9}, -1.0), ({"pool.utilization": 1.0}, -1.0),
])
def test_pool_utilization(features, expected):
    plugin = PoolUtilizationWeigher(build_options(
        PoolUtilizationWeigher, {"lower_bound": 0.5, "upper_bound": 0.9}))
    weight = plugin.weigh(pool("p", features=features), typed("cinder", {}), None)
    assert math.isclose(weight, expected)


def test_the_former_spellings_are_still_read(caplog):
    from cortex.pipeline.config import build_pipelines

    with caplog.at_level(logging.WARNING, logger="cortex.plugins.registry"):
        pipelines = build_pipelines({"defaults": {"cinder": "p"}, "pipelines": {"p": {
            "service": "cinder", "weighers": [{"name": "weigher_pool_utilisation"}]}}})
    assert pipelines.pipelines["p"].weighers[0].name == "weigher_pool_utilization"
    assert "weigher_pool_utilisation is deprecated" in caplog.text
    plugin = PoolUtilizationWeigher(build_options(
        PoolUtilizationWeigher, {"lower_bound": 0.5, "upper_bound": 0.9}))
    old = pool("p", features={"pool.utilisation": 0.7})
    assert math.isclose(plugin.weigh(old, typed("cinder", {}), None), -0.5)
    both = pool("p", features={"pool.utilisation": 0.7, "pool.utilization": 0.9})
    assert plugin.weigh(both, typed("cinder", {}), None) == -1.0


def test_pool_utilization_reads_the_named_feature():
    plugin = PoolUtilizationWeigher(build_options(
        PoolUtilizationWeigher, {"feature": "cpu.busy", "lower_bound": 0.0, "upper_bound": 1.0}))
    state = pool("p", features={"cpu.busy": 0.25, "pool.utilization": 0.9})
    assert plugin.weigh(state, typed("manila", {}), None) == -0.25
