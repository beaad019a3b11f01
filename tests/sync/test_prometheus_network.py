"""Network locations from Prometheus labels, against a real Prometheus (the third location source).

The series look like an LLDP exporter's neighbour metric relabelled with the fabric's
names: one series per host NIC, the host in ``instance`` (with a port, FQDN or short
name), the switch names in ``leaf``/``spine``, the NVL block and uplink alongside.
Some are wrong on purpose: a dual-homed host, a missing leaf label, an uplink that is
not a number, a host that disagrees with its leaf's other hosts.
"""

from __future__ import annotations

import time

import pytest
from sqlalchemy import insert, select

from cortex.api.app import create_app
from cortex.cmd import manage
from cortex.db import models
from cortex.knowledge.loader import load_view, read_version
from cortex.store.network import store_topology
from cortex.sync.runner import run_source
from cortex.sync.sources.prometheus import PrometheusSource
from cortex.sync.sources.prometheus_network import NetworkQuery
from tests.real_servers import ServerUnavailable, start_prometheus, stop
from tests.sync.conftest import sync_conf
from tests.sync.test_prometheus import openmetrics

STEP = 60
HOSTS = [f"cmp{i:04d}" for i in range(10)]
NIC = "lldp_neighbor_info"
SERIES = {
    # two NICs on the same leaf: one location
    'instance="cmp0000.cloud.example:9100",ifname="eth0",leaf="leaf-a",spine="spine-x",'
    'block="nvl-1",uplink="400"': "ok",
    'instance="cmp0000.cloud.example:9100",ifname="eth1",leaf="leaf-a",spine="spine-x",'
    'block="nvl-1",uplink="400"': "ok",
    'instance="CMP0001:9100",ifname="eth0",leaf="leaf-a",spine="spine-x",block="nvl-1",'
    'uplink="400"': "ok",
    'instance="cmp0002:9100",ifname="eth0",leaf="leaf-b",spine="spine-x"': "ok",
    # dual-homed: two leaves, which one is meant cannot be told
    'instance="cmp0003:9100",ifname="eth0",leaf="leaf-a",spine="spine-x",block="nvl-1",'
    'uplink="400"': "conflicting",
    'instance="cmp0003:9100",ifname="eth1",leaf="leaf-b",spine="spine-x"': "conflicting",
    'instance="cmp0004:9100",ifname="eth0",spine="spine-x"': "malformed (no leaf)",
    'instance="cmp0005:9100",ifname="eth0",leaf="leaf-b",spine="spine-x",uplink="fast"':
        "malformed (uplink)",
    # the topology file places cmp0006 on leaf-f: the file wins
    'instance="cmp0006:9100",ifname="eth0",leaf="leaf-b",spine="spine-x"': "placed by file",
    # a leaf the file defines: the file's spine, not this one
    'instance="cmp0007:9100",ifname="eth0",leaf="leaf-f",spine="spine-zzz"': "ok",
    # an aggregate places cmp0008 on rack-agg: the aggregate wins in the view
    'instance="cmp0008:9100",ifname="eth0",leaf="leaf-b",spine="spine-x"': "ok",
    # leaf-b's other hosts say spine-x
    'instance="cmp0009:9100",ifname="eth0",leaf="leaf-b",spine="spine-y"': "conflicting",
}
QUERY = NetworkQuery(NIC, "instance", "leaf", "spine", "block", "uplink")
FILE = {"spines": {"spine-f": {"uplink_gbps": 1600}},
        "leaves": {"leaf-f": {"spine": "spine-f", "block": "nvl-f", "hosts": ["cmp0006"]}}}
EXPECTED = {"cmp0000": "leaf-a", "cmp0001": "leaf-a", "cmp0002": "leaf-b",
            "cmp0007": "leaf-f", "cmp0008": "leaf-b"}


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    """A real Prometheus holding the last half hour of the series above; its URL, data end."""
    end = int(time.time() // STEP * STEP) - STEP
    series = {(NIC, labels): [(t, 1.0) for t in range(end - 1800, end + 1, STEP)]
              for labels in SERIES}
    try:
        process, url = start_prometheus(tmp_path_factory.mktemp("prometheus"), openmetrics(series))
    except ServerUnavailable as exc:
        pytest.fail(str(exc))
    yield url, end
    stop(process)


@pytest.fixture
def fleet(sync_engine):
    """Hypervisors, an aggregate placing cmp0008 and the topology file placing cmp0006."""
    with sync_engine.begin() as c:
        c.execute(insert(models.Hypervisor), [
            {"uuid": f"00000000-0000-0000-0000-00000000000{i}", "host": host,
             "node": f"{host}.cloud.example", "forced_down": False}
            for i, host in enumerate(HOSTS)])
        aggregate = c.execute(insert(models.Aggregate).values(
            uuid="a9a9a9a9-0000-0000-0000-000000000001", name="rack-agg",
            metadata_={"topology:leaf": "rack-agg", "topology:spine": "spine-x"})
            .returning(models.Aggregate.id)).scalar_one()
        c.execute(insert(models.AggregateHost).values(aggregate_id=aggregate, host="cmp0008"))
        store_topology(c, FILE)
    return sync_engine


def sync(engine, url, end, query=QUERY):
    result = run_source(engine, PrometheusSource(url, [], clock=lambda: end + 30.0,
                                                 network=query))
    assert result.ok, result.error
    return result


def stored(engine, model, key):
    table = model.__table__
    with engine.connect() as c:
        return {row[key]: {k: v for k, v in row.items() if k not in (key, "updated_at")}
                for row in c.execute(select(table)).mappings()}


def detail(engine):
    with engine.connect() as c:
        return c.execute(select(models.SyncStatus.detail)).scalar_one()


def test_locations_land_with_source_prometheus_and_bad_series_are_skipped(
        prometheus, fleet, caplog):
    url, end = prometheus
    file_domains = stored(fleet, models.NetworkDomain, "name")
    version = read_version(fleet)
    caplog.set_level("WARNING", "cortex.sync.sources.prometheus_network")

    sync(fleet, url, end)

    locations = stored(fleet, models.NetworkLocation, "host")
    assert {h: x["leaf"] for h, x in locations.items() if x["source"] == "prometheus"} == EXPECTED
    assert locations["cmp0006"] == {"leaf": "leaf-f", "source": "file"}
    domains = stored(fleet, models.NetworkDomain, "name")
    assert {k: v for k, v in domains.items() if v["source"] == "file"} == file_domains
    assert {k: v for k, v in domains.items() if v["source"] == "prometheus"} == {
        "leaf-a": {"kind": "leaf", "spine": "spine-x", "block": "nvl-1", "uplink_gbps": 400.0,
                   "adjacent": None, "source": "prometheus"},
        "leaf-b": {"kind": "leaf", "spine": "spine-x", "block": None, "uplink_gbps": None,
                   "adjacent": None, "source": "prometheus"},
        "spine-x": {"kind": "spine", "spine": None, "block": None, "uplink_gbps": None,
                    "adjacent": None, "source": "prometheus"},
    }
    assert detail(fleet)["network"] == {"locations": 5, "placed_by_file": 1,
                                        "skipped_malformed": 2, "skipped_conflicting": 2}
    logged = caplog.text
    assert "cmp0003: series disagree" in logged and "cmp0009: leaf leaf-b" in logged
    assert "has no leaf label" in logged and "not a positive number" in logged
    assert read_version(fleet) > version


def test_the_view_applies_aggregate_then_file_then_prometheus(prometheus, fleet,
                                                               sync_database_url, tmp_path,
                                                               capsys):
    url, end = prometheus
    sync(fleet, url, end)
    network = load_view(fleet).network
    where = {h: (x.leaf, x.spine, x.block, x.source) for h, x in network.locations.items()}
    assert where == {
        "cmp0000": ("leaf-a", "spine-x", "nvl-1", "prometheus"),
        "cmp0001": ("leaf-a", "spine-x", "nvl-1", "prometheus"),
        "cmp0002": ("leaf-b", "spine-x", None, "prometheus"),
        "cmp0006": ("leaf-f", "spine-f", "nvl-f", "file"),
        "cmp0007": ("leaf-f", "spine-f", "nvl-f", "prometheus"),  # the file's leaf
        "cmp0008": ("rack-agg", "spine-x", None, "aggregate"),
    }
    assert network.leaves["leaf-a"].uplink_gbps == 400.0
    assert network.leaves["leaf-a"].adjacent == {"leaf-b", "rack-agg"}  # same spine
    assert network.leaves["leaf-f"].source == "file"
    assert network.leaves["leaf-b"].source == "prometheus"

    config_file = tmp_path / "cortex.conf"
    config_file.write_text(f"[database]\nconnection = {sync_database_url}\n")
    assert manage.main(["--config-file", str(config_file), "network", "show"]) == 0
    shown = capsys.readouterr().out
    assert any(line.split()[0] == "cmp0007" and line.split()[-1] == "prometheus"
               for line in shown.splitlines() if line.strip())

    app = create_app(sync_conf(sync_database_url, api__auth_strategy="noauth",
                               database__knowledge_check_interval=0.0), engine=fleet)
    try:
        document = app.test_client().get("/v1/network-topology").get_json()
    finally:
        app.extensions["cortex"].decisions.close()
    assert {r["host"]: r["source"] for r in document["hosts"]} == {
        h: x[3] for h, x in where.items()}


def test_a_second_sync_changes_nothing_and_a_file_load_keeps_prometheus_rows(prometheus,
                                                                             fleet):
    url, end = prometheus
    sync(fleet, url, end)
    sync(fleet, url, end)
    again = detail(fleet)["tables"]
    assert again["network_locations"]["upserted"] == again["network_locations"]["deleted"] == 0
    assert again["network_domains"]["upserted"] == again["network_domains"]["deleted"] == 0

    # the file now defines leaf-a and lists cmp0002: Prometheus gives way, keeps the rest
    with fleet.begin() as c:
        store_topology(c, {"spines": {}, "leaves": {
            "leaf-a": {"spine": "spine-f", "hosts": ["cmp0002"]},
            "leaf-f": {"spine": "spine-f", "hosts": ["cmp0006"]}}})
    locations = stored(fleet, models.NetworkLocation, "host")
    assert {h: (x["leaf"], x["source"]) for h, x in locations.items()} == {
        "cmp0000": ("leaf-a", "prometheus"), "cmp0001": ("leaf-a", "prometheus"),
        "cmp0002": ("leaf-a", "file"), "cmp0006": ("leaf-f", "file"),
        "cmp0007": ("leaf-f", "prometheus"), "cmp0008": ("leaf-b", "prometheus")}
    assert stored(fleet, models.NetworkDomain, "name")["leaf-a"]["source"] == "file"
    # and the next sync agrees with what the file load left
    sync(fleet, url, end)
    assert {h: (x["leaf"], x["source"]) for h, x in stored(
        fleet, models.NetworkLocation, "host").items()} == {
        h: (x["leaf"], x["source"]) for h, x in locations.items()}


def test_a_rejected_query_keeps_the_previous_locations(prometheus, fleet):
    url, end = prometheus
    sync(fleet, url, end)
    before = stored(fleet, models.NetworkLocation, "host")
    sync(fleet, url, end, NetworkQuery("sum((", "instance", "leaf"))
    assert stored(fleet, models.NetworkLocation, "host") == before
    assert detail(fleet)["network"] == {"failed": True}
    assert any(w.startswith("network location: bad_data") for w in detail(fleet)["warnings"])


def write_config(tmp_path, database_url, url, network=""):
    queries = tmp_path / "q.yaml"
    queries.write_text("queries: []\n")
    config_file = tmp_path / "cortex.conf"
    config_file.write_text(f"[database]\nconnection = {database_url}\n"
                           f"[prometheus]\nurl = {url}\nqueries_file = {queries}\n{network}")
    return str(config_file)


def test_the_source_is_off_by_default(prometheus, fleet, sync_database_url, tmp_path):
    url, _ = prometheus
    before = stored(fleet, models.NetworkLocation, "host")
    config_file = write_config(tmp_path, sync_database_url, url)
    assert manage.main(["--config-file", config_file, "sync", "--once",
                        "--source", "prometheus"]) == 0
    assert stored(fleet, models.NetworkLocation, "host") == before
    assert "network" not in detail(fleet)


def test_cortex_manage_syncs_the_configured_mapping(prometheus, fleet, sync_database_url,
                                                    tmp_path):
    url, _ = prometheus
    config_file = write_config(
        tmp_path, sync_database_url, url,
        f"[network]\nprometheus_query = {NIC}{{ifname=\"eth0\"}}\n"
        "prometheus_block_label = block\nprometheus_uplink_label = uplink\n")
    assert manage.main(["--config-file", config_file, "sync", "--once",
                        "--source", "prometheus"]) == 0
    locations = stored(fleet, models.NetworkLocation, "host")
    # eth0 only: cmp0003 is no longer dual-homed
    assert {h: x["leaf"] for h, x in locations.items() if x["source"] == "prometheus"} == {
        **EXPECTED, "cmp0003": "leaf-a"}
