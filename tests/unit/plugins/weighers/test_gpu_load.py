"""weigher_gpu_load: the GPUs' load and temperature."""

import math

import pytest

from cortex.plugins.base import OptionsError, build_options
from cortex.plugins.weighers.gpu_load import GpuLoadWeigher
from tests.gpu_fakes import gpu_host, gpu_request, weigh
from tests.unit.plugins.weighers.weighing import make


@pytest.mark.parametrize("features, options, expected", [
    ({"gpu.utilization": 0.5, "gpu.framebuffer_used_bytes": 30.0,
      "gpu.framebuffer_free_bytes": 70.0, "gpu.temperature_celsius": 72.5}, {},
     -(0.5 + 0.3 + 0.5 * 0.5) / 2.5),
    ({"gpu.utilization": 0.5}, {}, -0.5),
    ({"gpu.utilization": 1.7}, {}, -1.0),                         # clamped
    ({"gpu.utilization.window_mean": 0.2, "gpu.utilization": 0.9},
     {"utilization_feature": "gpu.utilization.window_mean"}, -0.2),
    ({"gpu.temperature_celsius": 95.0}, {"utilization_weight": 0.0}, -1.0),
    ({}, {}, 0.0),
])
def test_gpu_load(features, options, expected):
    state = gpu_host(features=features)
    value = weigh(make(GpuLoadWeigher, **options), state, gpu_request(gpus=0, vgpus=1))
    assert math.isclose(value, expected)


def test_gpu_load_runs_for_vgpu_requests_unless_told():
    assert GpuLoadWeigher().applies(gpu_request(gpus=0, vgpus=1))
    assert not GpuLoadWeigher().applies(gpu_request())
    assert make(GpuLoadWeigher, requests="gpu").applies(gpu_request())


@pytest.mark.parametrize("options, message", [
    ({"temperature_bounds": [90.0, 60.0]}, "temperature_bounds"),
    ({"requests": "all"}, "requests"),
])
def test_options_are_validated(options, message):
    with pytest.raises(OptionsError, match=message):
        build_options(GpuLoadWeigher, options)
