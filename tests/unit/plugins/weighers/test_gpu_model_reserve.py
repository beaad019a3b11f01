"""weigher_gpu_model_reserve: keep a pressed GPU model's hosts for the creates bound to it."""

from dataclasses import replace
from types import MappingProxyType

import pytest

from cortex.knowledge.model_demand import model_pressure, model_supply
from cortex.plugins.base import OptionsError, build_options
from cortex.plugins.weighers.gpu_model_reserve import GpuModelReserveWeigher
from tests.fakes import host, view
from tests.gpu_fakes import A100, H100, L40S, gpu_host, gpu_request, weigh

HGX, L40S_NAME, A100_NAME = "NVIDIA H100 80GB HBM3", "NVIDIA L40S", "NVIDIA A100 80GB PCIe"


def fleet(demand):
    """One HGX host (8 H100), two of 4 L40S, one of 4 A100: 20 GPUs; ``demand`` recorded."""
    hosts = [gpu_host("hgx"), gpu_host("l40s-1", board="l40s-4gpu-pcie"),
             gpu_host("l40s-2", board="l40s-4gpu-pcie"),
             gpu_host("a100", board="a100-pcie-4gpu-nvlink-pairs")]
    return replace(view(*hosts), gpu_model_demand=MappingProxyType(demand))


def test_pressure_is_named_share_over_supply_share():
    # 100 GPUs asked: 48 named L40S (8 of 20 GPUs), 10 named H100 (8 of 20), 42 any
    shared = fleet({L40S_NAME: 48.0, HGX: 10.0, "any": 42.0})
    assert dict(model_supply(shared)) == {HGX: 8, L40S_NAME: 8, A100_NAME: 4}
    pressure = model_pressure(shared)
    assert pressure[L40S_NAME] == pytest.approx((48 / 58) / (8 / 20))
    assert pressure[HGX] == pytest.approx((10 / 58) / (8 / 20))
    assert pressure[A100_NAME] == 0.0
    assert model_pressure(shared, min_learned=101) == {}


def test_requests_taking_any_model_leave_the_pressed_model():
    shared = fleet({L40S_NAME: 48.0, HGX: 10.0, "any": 42.0})
    plugin = GpuModelReserveWeigher()
    anywhere = gpu_request(gpus=1, products=())
    weights = {name: weigh(plugin, shared.hosts[name], anywhere, shared)
               for name in shared.hosts}
    # L40S: pressure 2.07, above the threshold of 1.5, over the scale of 0.25
    l40s = -((48 / 58) / (8 / 20) - 1.5) / 0.25
    assert weights == {"hgx": 0.0, "l40s-1": pytest.approx(l40s),
                       "l40s-2": pytest.approx(l40s), "a100": 0.0}
    # a request bound to the L40S sees the same weight on every host it can take
    bound = gpu_request(gpus=1, products=(L40S,))
    assert weigh(plugin, shared.hosts["l40s-1"], bound, shared) == weights["l40s-1"]
    # a request taking H100 or A100 reads only those GPUs' models
    either = gpu_request(gpus=1, products=(H100, A100))
    assert weigh(plugin, shared.hosts["hgx"], either, shared) == 0.0
    assert weigh(plugin, host("plain"), anywhere, shared) == 0.0


def test_nothing_moves_until_named_demand_is_learned():
    plugin = GpuModelReserveWeigher()
    anywhere = gpu_request(gpus=1, products=())
    spread = {HGX: 40.0, L40S_NAME: 40.0, A100_NAME: 20.0, "any": 100.0}  # as the GPUs
    for demand in ({}, {"any": 500.0}, {L40S_NAME: 40.0, "any": 20.0}, spread):
        shared = fleet(demand)
        assert {weigh(plugin, state, anywhere, shared) for state in shared.hosts.values()} == {
            0.0}, demand


def test_memo_key_is_the_accepted_products():
    plugin = GpuModelReserveWeigher()
    assert plugin.memo_key(gpu_request(gpus=1, products=())) == frozenset()
    assert plugin.memo_key(gpu_request(gpus=1, products=(L40S, H100))) == {L40S, H100}
    assert not plugin.applies(gpu_request(gpus=0))


@pytest.mark.parametrize("options, message", [
    ({"threshold": -0.1}, "threshold"),
    ({"min_learned": -1}, "min_learned"),
    ({"scale": 0}, "scale"),
])
def test_options_are_validated(options, message):
    with pytest.raises(OptionsError, match=message):
        build_options(GpuModelReserveWeigher, options)
