"""GPU power and carbon per host and zone (cortex.knowledge.energy), its options and gauges."""

import dataclasses
import math
import re

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from cortex import conf
from cortex.api.metrics import EnergySettings, KnowledgeCollector, energy_families
from cortex.knowledge.energy import host_power, zone_energy
from cortex.sync.sources.prometheus import load_queries
from tests.conftest import REPO
from tests.fake_topology import hgx, topology_host
from tests.fakes import ViewCache, host, inventory, view


def nvml_hgx(*watts):
    """An HGX board whose GPUs report ``watts`` (None: not known) in order, the rest None."""
    board = hgx()
    readings = list(watts) + [None] * (len(board.gpus) - len(watts))
    return dataclasses.replace(board, gpus=tuple(
        dataclasses.replace(g, power_watts=w) for g, w in zip(board.gpus, readings,
                                                              strict=True)))


def gpu_host(name, az="az-1", watts=(), features=None):
    """An 8-GPU host in ``az`` whose GPUs report ``watts`` through NVML."""
    return topology_host(name, nvml_hgx(*watts), az=az, features=features)


# ------------------------------------------------------------------ host_power


def test_dcgm_is_preferred_over_nvml():
    state = gpu_host("h", watts=[100.0] * 8, features={"gpu.power_watts": 2400.0})
    assert host_power(state) == (2400.0, "dcgm")


def test_nvml_sums_the_gpus_that_answered():
    state = gpu_host("h", watts=[70.5, 300.0, None, 69.5])
    assert host_power(state) == (440.0, "nvml")


def test_unknown_power_is_none_for_both():
    assert host_power(gpu_host("h")) == (None, None)  # a report without readings
    assert host_power(host("cpu-only")) == (None, None)  # no report at all


@pytest.mark.parametrize("reading", [-1.0, math.nan])
def test_a_meaningless_dcgm_reading_falls_back_to_nvml(reading):
    state = gpu_host("h", watts=[50.0], features={"gpu.power_watts": reading})
    assert host_power(state) == (50.0, "nvml")


def test_power_does_not_enter_the_topologys_identity():
    assert nvml_hgx(100.0) == nvml_hgx(200.0) == hgx()


# ------------------------------------------------------------------ zone_energy


def fleet():
    """az-a: DCGM host (1000 W), NVML host (8 x 50 W), dark GPU host, CPU host; az-b: one."""
    return view(
        gpu_host("a-dcgm", "az-a", features={"gpu.power_watts": 1000.0}),
        gpu_host("a-nvml", "az-a", watts=[50.0] * 8),
        gpu_host("a-dark", "az-a"),
        host("a-cpu", az="az-a"),
        gpu_host("b-nvml", "az-b", watts=[100.0, 100.0]),
        host("c-cpu", az="az-c"),
    )


def test_zone_sums_hosts_gpus_and_emission_with_the_configured_intensity():
    zones = {z.availability_zone: z for z in zone_energy(fleet(), {"az-a": 120.0}, 400.0)}
    assert sorted(zones) == ["az-a", "az-b"]  # az-c has no GPU host
    a = zones["az-a"]
    assert (a.hosts, a.hosts_with_power, a.gpus) == (3, 2, 24)
    assert a.power_watts == 1400.0
    assert (a.carbon_intensity, a.intensity_source) == (120.0, "config")
    assert a.grams_per_hour == pytest.approx(1.4 * 120.0)
    b = zones["az-b"]
    assert (b.power_watts, b.carbon_intensity, b.intensity_source) == (200.0, 400.0, "default")
    assert b.grams_per_hour == pytest.approx(0.2 * 400.0)


def test_prometheus_intensity_is_the_mean_over_the_zones_hosts_that_carry_it():
    hosts = [gpu_host("g1", "az-a", watts=[500.0], features={"carbon.intensity_g_per_kwh": 100}),
             host("c1", az="az-a", features={"carbon.intensity_g_per_kwh": 200.0}),
             gpu_host("g2", "az-a", watts=[500.0])]  # no reading: not in the mean
    (zone,) = zone_energy(view(*hosts), {"az-a": 999.0}, 400.0)
    assert (zone.carbon_intensity, zone.intensity_source) == (150.0, "prometheus")
    assert zone.grams_per_hour == pytest.approx(1.0 * 150.0)


def test_a_zone_without_known_power_has_no_power_nor_emission():
    (zone,) = zone_energy(view(gpu_host("dark", "az-a")), {}, 300.0)
    assert (zone.hosts, zone.hosts_with_power, zone.gpus) == (1, 0, 8)
    assert zone.power_watts is None and zone.grams_per_hour is None
    assert (zone.carbon_intensity, zone.intensity_source) == (300.0, "default")


def test_hosts_without_zone_are_zone_none_and_placement_counts_unreported_gpus():
    unreported = host("p", az=None, inventories={"CUSTOM_PCI_10DE_2330": inventory(4),
                                                  "VCPU": inventory(16)})
    (zone,) = zone_energy(view(unreported), {"none": 50.0}, 400.0)
    assert (zone.availability_zone, zone.hosts, zone.gpus) == ("none", 1, 4)
    assert (zone.carbon_intensity, zone.intensity_source) == (50.0, "config")


# ------------------------------------------------------------------ [energy] options


@pytest.mark.parametrize("text, detail", [
    ("az-a=120", "entry 'az-a=120' is not ZONE:NUMBER"),
    ("az-a:lots", "'lots' is not a number"),
    (":120", "entry ':120' is not ZONE:NUMBER"),
    ("az-a:-5", "finite and >= 0"),
    ("az-a:inf", "finite and >= 0"),
    ("az-a:120, az-a:130", "zone 'az-a' is given twice"),
])
def test_a_malformed_carbon_intensity_is_refused_at_load_in_one_line(tmp_path, text, detail):
    path = tmp_path / "cortex.conf"
    path.write_text(f"[energy]\ncarbon_intensity = {text}\n")
    with pytest.raises(conf.ConfigError) as info:
        conf.load(str(path), environ={})
    message = str(info.value)
    assert message.startswith("[energy] carbon_intensity: ") and "\n" not in message
    assert detail in message and "expected comma-separated ZONE:GRAMS entries" in message
    with pytest.raises(conf.ConfigError, match="carbon_intensity"):
        conf.load(environ={"CORTEX_ENERGY_CARBON_INTENSITY": text})
    with pytest.raises(conf.ConfigError, match="carbon_intensity"):
        conf.load(environ={}).with_overrides({"energy.carbon_intensity": text})


def test_energy_options_parse_into_settings():
    loaded = conf.load(environ={"CORTEX_ENERGY_CARBON_INTENSITY": " az-a:120, az-b : 380.5 ,",
                                "CORTEX_ENERGY_DEFAULT_CARBON_INTENSITY": "0",
                                "CORTEX_ENERGY_EXPORT_HOSTS": "false"})
    assert EnergySettings.from_conf(loaded) == EnergySettings({"az-a": 120.0, "az-b": 380.5},
                                                              0.0, False)
    assert EnergySettings.from_conf(conf.load(environ={})) == EnergySettings({}, 400.0, True)
    with pytest.raises(conf.ConfigError, match=r"default_carbon_intensity: -1\.0 is not allowed"):
        conf.load(environ={"CORTEX_ENERGY_DEFAULT_CARBON_INTENSITY": "-1"})


# ------------------------------------------------------------------ gauges


def samples(families):
    """``{(name, labels...): value}`` of the families' samples."""
    return {(s.name, *s.labels.values()): s.value for f in families for s in f.samples}


def test_energy_gauges_of_a_fleet():
    found = samples(energy_families(fleet(), EnergySettings({"az-a": 120.0}, 400.0)))
    assert found == {
        ("cortex_host_gpu_power_watts", "a-dcgm", "az-a", "dcgm"): 1000.0,
        ("cortex_host_gpu_power_watts", "a-nvml", "az-a", "nvml"): 400.0,
        ("cortex_host_gpu_power_watts", "b-nvml", "az-b", "nvml"): 200.0,
        ("cortex_zone_gpu_power_watts", "az-a"): 1400.0,
        ("cortex_zone_gpu_power_watts", "az-b"): 200.0,
        ("cortex_zone_carbon_intensity_grams_per_kwh", "az-a", "config"): 120.0,
        ("cortex_zone_carbon_intensity_grams_per_kwh", "az-b", "default"): 400.0,
        ("cortex_zone_carbon_emission_grams_per_hour", "az-a"): pytest.approx(168.0),
        ("cortex_zone_carbon_emission_grams_per_hour", "az-b"): pytest.approx(80.0),
    }


def test_host_series_can_be_turned_off():
    families = energy_families(fleet(), EnergySettings(export_hosts=False))
    assert "cortex_host_gpu_power_watts" not in {f.name for f in families}
    assert samples(families)[("cortex_zone_gpu_power_watts", "az-a")] == 1400.0


def test_the_collector_renders_energy_and_kpis_once_per_view(monkeypatch):
    import cortex.api.metrics as metrics

    calls = []
    real = metrics.energy_families
    monkeypatch.setattr(metrics, "energy_families",
                        lambda v, s: calls.append(v) or real(v, s))
    cache = ViewCache(fleet())
    collector = KnowledgeCollector(cache, energy=EnergySettings({"az-a": 120.0}))
    texts = [collector.rendered() for _ in range(3)]
    names = {f.name for f in text_string_to_metric_families(texts[0].decode())}
    assert {"cortex_zone_carbon_emission_grams_per_hour", "cortex_gpus_free"} <= names
    assert len(calls) == 1 and texts[1] is texts[0] and texts[2] is texts[0]
    cache.current = dataclasses.replace(cache.current, version=2)  # a new view
    collector.rendered()
    assert len(calls) == 2
    metrics_of_app = metrics.ApiMetrics()
    metrics_of_app.add_scrape_collector(collector)
    exposition = metrics_of_app.exposition().decode()
    assert exposition.endswith(collector.rendered().decode())   # after the registry's
    assert "cortex_knowledge_version" in exposition


# ------------------------------------------------------------------ the example query


def test_the_commented_carbon_intensity_query_loads_once_uncommented(tmp_path):
    text = (REPO / "etc" / "cortex" / "prometheus-queries.yaml").read_text()
    block = re.search(r"^  # - feature: carbon\.intensity_g_per_kwh\n(?:  #   .*\n)+", text,
                      re.MULTILINE)
    assert block, "the commented example is gone"
    query = "\n".join(line.replace("  # ", "  ", 1) for line in block.group(0).splitlines())
    path = tmp_path / "queries.yaml"
    path.write_text(yaml.safe_dump({"host_labels": ["instance"]}) + "queries:\n" + query + "\n")
    (loaded,) = load_queries(path)
    assert loaded.feature == "carbon.intensity_g_per_kwh"
    assert "grid_carbon_intensity_grams_per_kwh" in loaded.query


def test_the_docs_document_the_energy_metrics():
    section = (REPO / "docs" / "observability" / "metrics.md").read_text()
    for name in ("cortex_host_gpu_power_watts", "cortex_zone_gpu_power_watts",
                 "cortex_zone_carbon_intensity_grams_per_kwh",
                 "cortex_zone_carbon_emission_grams_per_hour"):
        assert f"`{name}`" in section, name


# ------------------------------------------------------------------ per-model draws


def test_model_draws_read_each_view_s_host_states():
    """A host whose state changed between two views is read as it is in each view.

    The per-host readings are kept by host state (a view keeps the states of the hosts
    that did not change): the idle host's state is shared by all three views, the other
    host busy with 2 GPUs, then with 4, then idle. DCGM watts summed over 8 GPUs.
    """
    from cortex.knowledge.energy import ModelDraws
    from tests.gpu_fakes import gpu_host as board_host
    from tests.unit.gpu_boards import HGX

    idle = board_host("idle", features={"gpu.power_watts": 560.0})       # 70 W a GPU
    two = board_host("busy", in_use=HGX[:2], features={"gpu.power_watts": 1620.0})
    four = board_host("busy", in_use=HGX[:4], features={"gpu.power_watts": 2280.0})
    none = board_host("busy", features={"gpu.power_watts": 640.0})       # 80 W a GPU
    product = idle.topology.gpus[0].device_id
    first, second, third = (ModelDraws(view(idle, other), 60.0) for other in (two, four, none))
    assert (first.idle, first.busy) == ({product: 70.0}, {product: (1620.0 - 6 * 70) / 2})
    assert (second.idle, second.busy) == ({product: 70.0}, {product: (2280.0 - 4 * 70) / 4})
    assert (third.idle, third.busy) == ({product: 75.0}, {})
    assert ModelDraws(view(idle, two), 60.0).busy == first.busy


def test_model_draws_hold_no_replaced_view_s_host_states_alive():
    """The readings kept for host states and topologies of views replaced since are let go."""
    from cortex.knowledge import energy
    from cortex.knowledge.energy import ModelDraws
    from tests.gpu_fakes import gpu_host as board_host

    old = board_host("old", features={"gpu.power_watts": 560.0})
    ModelDraws(view(old), 60.0)
    assert any(state is old for state, _ in energy._METERED.values())
    assert any(topology is old.topology for topology, _ in energy._BUSY.values())
    for number in range(4):  # later views of other hosts
        ModelDraws(view(board_host(f"new{number}", features={"gpu.power_watts": 560.0})),
                   60.0)
    assert not any(state is old for state, _ in energy._METERED.values())
    assert len(energy._METERED) <= 2
    assert not any(topology is old.topology for topology, _ in energy._BUSY.values())
