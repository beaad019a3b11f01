"""/metrics exposes GPU power and carbon per host and zone from the worker's view."""

import dataclasses
from types import MappingProxyType

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cortex.api.app import create_app
from tests.api.conftest import make_conf

HGX_WATTS = 8 * 69.841  # the demo fleet's HGX reports: eight H100 at 69.841 W (NVML)


def energy_app(engine, database_url, **energy):
    """An app on the demo fleet with ``[energy]`` options ``energy``."""
    return create_app(make_conf(**{"database.connection": database_url,
                                   "database.knowledge_check_interval": 0.0,
                                   **{f"energy.{k}": v for k, v in energy.items()}}),
                      engine=engine)


@pytest.fixture
def app(engine, database_url):
    app = energy_app(engine, database_url, carbon_intensity="az-1:120, az-9:5")
    yield app
    app.extensions["cortex"].decisions.close()


#: The label names of each energy series, in the order the keys of :func:`scrape` give them.
LABELS = {"cortex_host_gpu_power_watts": ("host", "availability_zone", "source"),
          "cortex_zone_gpu_power_watts": ("availability_zone",),
          "cortex_zone_carbon_intensity_grams_per_kwh": ("availability_zone", "source"),
          "cortex_zone_carbon_emission_grams_per_hour": ("availability_zone",)}


def scrape(app) -> dict[tuple, float]:
    """``{(name, label values...): value}`` of the energy series of one ``GET /metrics``."""
    response = app.test_client().get("/metrics")
    assert response.status_code == 200
    found = {}
    for family in text_string_to_metric_families(response.get_data(as_text=True)):
        for sample in family.samples if family.name in LABELS else ():
            assert set(sample.labels) == set(LABELS[family.name])
            found[(sample.name, *(sample.labels[k] for k in LABELS[family.name]))] = \
                sample.value
    return found


def test_the_demo_fleets_nvml_power_is_exported(app):
    found = scrape(app)
    assert found[("cortex_host_gpu_power_watts", "cmp0000", "az-1", "nvml")] == \
        pytest.approx(HGX_WATTS)
    assert found[("cortex_host_gpu_power_watts", "cmp0047", "az-2", "nvml")] == \
        pytest.approx(HGX_WATTS)
    assert found[("cortex_zone_gpu_power_watts", "az-2")] == pytest.approx(HGX_WATTS)
    assert found[("cortex_zone_carbon_intensity_grams_per_kwh", "az-1", "config")] == 120.0
    assert found[("cortex_zone_carbon_intensity_grams_per_kwh", "az-2", "default")] == 400.0
    assert found[("cortex_zone_carbon_emission_grams_per_hour", "az-2")] == \
        pytest.approx(HGX_WATTS / 1000 * 400)
    zone_a = found[("cortex_zone_gpu_power_watts", "az-1")]
    hosts_a = sum(v for k, v in found.items()
                  if k[0] == "cortex_host_gpu_power_watts" and k[2] == "az-1")
    assert zone_a == pytest.approx(hosts_a) and zone_a > HGX_WATTS
    assert found[("cortex_zone_carbon_emission_grams_per_hour", "az-1")] == \
        pytest.approx(zone_a / 1000 * 120)
    assert not any("az-9" in key for key in found)  # a zone without GPU hosts


def test_dcgm_power_and_prometheus_intensity_win(app, monkeypatch):
    cache = app.extensions["cortex"].knowledge
    current = cache.view()
    hosts = dict(current.hosts)
    hosts["cmp0047"] = dataclasses.replace(hosts["cmp0047"], features=MappingProxyType({
        "gpu.power_watts": 2400.0, "carbon.intensity_g_per_kwh": 50.0}))
    hosts["cmp0040"] = dataclasses.replace(hosts["cmp0040"], features=MappingProxyType({
        "carbon.intensity_g_per_kwh": 70.0}))  # a CPU host of az-2: in the zone's mean
    monkeypatch.setattr(cache, "_view", dataclasses.replace(
        current, hosts=MappingProxyType(hosts)))
    found = scrape(app)
    assert found[("cortex_host_gpu_power_watts", "cmp0047", "az-2", "dcgm")] == 2400.0
    assert ("cortex_host_gpu_power_watts", "cmp0047", "az-2", "nvml") not in found
    assert found[("cortex_zone_gpu_power_watts", "az-2")] == 2400.0
    assert found[("cortex_zone_carbon_intensity_grams_per_kwh", "az-2", "prometheus")] == 60.0
    assert found[("cortex_zone_carbon_emission_grams_per_hour", "az-2")] == \
        pytest.approx(2.4 * 60.0)


def test_host_series_are_left_out_when_turned_off(engine, database_url):
    app = energy_app(engine, database_url, export_hosts="false")
    try:
        found = scrape(app)
    finally:
        app.extensions["cortex"].decisions.close()
    assert not any(key[0] == "cortex_host_gpu_power_watts" for key in found)
    assert found[("cortex_zone_gpu_power_watts", "az-2")] == pytest.approx(HGX_WATTS)
    assert found[("cortex_zone_carbon_intensity_grams_per_kwh", "az-1", "default")] == 400.0
