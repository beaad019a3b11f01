"""weigher_gpu_energy: the placement's energy and carbon cost."""

import math

import pytest

from cortex.plugins.base import OptionsError, build_options
from cortex.plugins.weighers.gpu_energy import GpuEnergyWeigher
from tests.fakes import view
from tests.gpu_fakes import gpu_host, gpu_request, weigh
from tests.unit.gpu_boards import HGX
from tests.unit.plugins.weighers.weighing import make


def busy_hgx(name="busy", az="az-1", temperature=None):
    features = {"gpu.power_watts": 2 * 600.0 + 6 * 70.0}
    if temperature is not None:
        features["gpu.temperature_celsius"] = temperature
    return gpu_host(name, az=az, in_use=HGX[:2], features=features)


@pytest.mark.parametrize("hosts, options, expected", [
    # alone in the view: idle draw from the option (60 W); (1620 - 6 * 60) / 2 = 630 W busy
    ([busy_hgx(temperature=80.0)], {}, -(630 - 60) * 400 * 1.4 / 1000 / 200),
    ([busy_hgx(az="az-2")], {"carbon_intensity": {"az-2": 50.0}}, -(630 - 60) * 50 / 1e3 / 200),
    # an idle host of the model in the view: idle 70 W; busy (1620 - 6 * 70) / 2 = 600 W
    ([busy_hgx(), gpu_host("idle", features={"gpu.power_watts": 560.0})], {},
     -(600 - 70) * 400 / 1000 / 200),
])
def test_gpu_energy_of_a_busy_host(hosts, options, expected):
    state = hosts[0]
    value = weigh(make(GpuEnergyWeigher, **options), state, gpu_request(), view(*hosts))
    assert math.isclose(value, expected)


def test_gpu_energy_of_an_idle_host_uses_its_models_busy_draw():
    idle = gpu_host("idle", features={"gpu.power_watts": 560.0})
    both = view(busy_hgx(), idle)
    assert math.isclose(weigh(GpuEnergyWeigher(), idle, gpu_request(), both),
                        -(600 - 70) * 400 / 1000 / 200)
    woken = make(GpuEnergyWeigher, idle_host_watts=100.0)
    assert math.isclose(weigh(woken, idle, gpu_request(), both),
                        -(600 - 70 + 100) * 400 / 1000 / 200)
    # nothing known: default busy minus idle watts
    assert math.isclose(weigh(GpuEnergyWeigher(), gpu_host(), gpu_request()),
                        -(300 - 60) * 400 / 1000 / 200)


def test_gpu_energy_prefers_the_greener_zone():
    options = {"carbon_intensity": {"az-1": 400.0, "az-2": 30.0}}
    green = weigh(make(GpuEnergyWeigher, **options), busy_hgx(az="az-2"), gpu_request())
    grey = weigh(make(GpuEnergyWeigher, **options), busy_hgx(az="az-1"), gpu_request())
    assert green > grey


@pytest.mark.parametrize("options, message", [
    ({"default_busy_watts": 10.0}, "exceed"),
])
def test_options_are_validated(options, message):
    with pytest.raises(OptionsError, match=message):
        build_options(GpuEnergyWeigher, options)
