"""The Nova source behind a real openstacksdk connection to the fake Nova.

Pages past 1000 servers, microversion negotiation (2.100, Nova 34's, and an older 2.60 cloud),
the services joined into hypervisors, in-progress migrations only.
"""

from __future__ import annotations

import copy

import pytest
from sqlalchemy import func, select

from cortex.db import models
from cortex.sync import derive
from cortex.sync.runner import run_source
from cortex.sync.sources import build_sources
from tests.fake_openstack import now_iso, sample
from tests.sync.conftest import sync_conf

SERVERS = 2500


def fill(cloud) -> None:
    for host, zone, state in (("cmp0000", "az-1", "up"), ("cmp0001", "az-2", "down")):
        root = cloud.add_compute_host(host, f"{host}.cloud.example", zone=zone, state=state,
                                      host_ip=f"10.0.0.{host[-1]}")
        cloud.add_provider(root, f"{host}.cloud.example", root, None, {"VCPU": (64, 4.0, 8)})
    cloud.services[1]["forced_down"] = True
    for i in range(SERVERS):
        host = f"cmp000{i % 2}"
        cloud.add_server(f"00000000-0000-4000-8000-{i:012d}", host, f"{host}.cloud.example",
                         tenant_id=f"project-{i % 7}")
    cloud.flavors = sample("nova/flavors_v2.75_flavors-detail-resp.json")["flavors"]
    cloud.server_groups = sample("nova/os-server-groups_v2.64_server-groups-list-resp.json")[
        "server_groups"]
    cloud.migrations = sample("nova/os-migrations_v2.80_migrations-get-with-changes-since.json")[
        "migrations"]
    cloud.migrations.append(dict(cloud.migrations[0], id=7, status="running",
                                 uuid="77777777-0000-4000-8000-000000000000",
                                 source_compute="cmp0000", dest_compute="cmp0001",
                                 migration_type="live-migration",
                                 instance_uuid="00000000-0000-4000-8000-000000000004"))
    cloud.aggregates = sample("nova/os-aggregates_v2.81_aggregates-list-get-resp.json")[
        "aggregates"]


def nova(engine, fake, database_url, *more, **overrides):
    results = [run_source(engine, source) for source in build_sources(
        sync_conf(database_url, fake, **overrides), ("nova", *more))]
    return results[0]


def count(engine, model) -> int:
    with engine.connect() as c:
        return c.execute(select(func.count()).select_from(model)).scalar_one()


def table(engine, model) -> dict:
    with engine.connect() as c:
        return {r[0]: r._asdict() for r in c.execute(select(model.__table__))}


def test_nova_pages_past_1000_servers_at_the_negotiated_microversion(openstack, sync_engine,
                                                                     sync_database_url):
    fill(openstack.cloud)
    openstack.cloud.add_compute_host("cmp0002", "cmp0002.cloud.example")  # not in Placement
    result = nova(sync_engine, openstack, sync_database_url, "placement")
    assert result.ok, result.error

    pages = [path for method, path, _ in openstack.requests if path.endswith("/servers/detail")]
    # nova: 1000 + 1000 + 500, following servers_links; placement: one server for
    # Nova's clock (where its run began)
    assert len(pages) == 4
    versions = {v for _, path, v in openstack.requests if path.startswith("/compute/v2.1/")}
    assert versions == {"compute 2.100"}

    servers = table(sync_engine, models.Server)
    assert len(servers) == SERVERS
    first = servers["00000000-0000-4000-8000-000000000001"]
    upstream = openstack.cloud.servers[1]
    assert (first["host"], first["node"], first["project_id"], first["user_id"]) == (
        "cmp0001", "cmp0001.cloud.example", "project-1", upstream["user_id"])
    assert first["flavor_name"] == "m1.tiny" and first["flavor"]["vcpus"] == 1
    assert first["flavor"]["extra_specs"] == {}
    assert (first["status"], first["vm_state"], first["task_state"]) == ("ACTIVE", "active", None)
    assert first["created_at"].isoformat() == "2013-09-03T04:01:32+00:00"

    hypervisors = table(sync_engine, models.Hypervisor)
    down = hypervisors[openstack.cloud.hypervisors[1]["id"]]
    assert (down["host"], down["zone"], down["state"], down["forced_down"], down["host_ip"]) == (
        "cmp0001", "az-2", "down", True, "10.0.0.1")
    assert down["cpu_arch"] is None  # cpu_info is gone at 2.88+
    with sync_engine.connect() as c:
        nodes = {r.host: r for r in c.execute(select(models.ComputeNode.__table__))}
    assert nodes["cmp0001"].up is False and nodes["cmp0000"].up is True
    assert nodes["cmp0001"].availability_zone == "az-2"
    assert "cmp0002" not in nodes, "a node Placement does not know is no compute node yet"

    flavors = table(sync_engine, models.Flavor)
    assert flavors["7"]["extra_specs"] == {"hw:cpu_policy": "shared", "hw:numa_nodes": "1"}
    assert flavors["7"]["description"] == "test description"
    groups = table(sync_engine, models.ServerGroup)
    assert groups["616fb98f-46ca-475e-917e-2563e5a8cd19"]["rules"] == {"max_server_per_host": 3}
    migrations = table(sync_engine, models.ServerMigration)
    assert sorted(migrations) == ["42341d4b-346a-40d0-83c6-5f4f6892b650",  # "error" is over
                                  "77777777-0000-4000-8000-000000000000"]
    assert migrations["42341d4b-346a-40d0-83c6-5f4f6892b650"]["dest_compute"] == "compute20"

    with sync_engine.connect() as c:
        features = {(r.host, r.feature): r.value for r in c.execute(
            select(models.HostFeature.__table__))}
    assert features[("cmp0000", "instances")] == SERVERS / 2
    assert features[("compute10", "migrations_in_progress")] == 1
    assert features[("cmp0001", "migrations_in_progress")] == 1

    with sync_engine.connect() as c:
        hypervisors = c.execute(select(models.Hypervisor.__table__)).mappings().all()
        facts = derive.node_facts(c, hypervisors)
    cmp0000 = facts[openstack.cloud.hypervisors[0]["id"]]
    assert len(cmp0000["instances"]) == SERVERS / 2
    assert cmp0000["instances"][0] == {
        "uuid": "00000000-0000-4000-8000-000000000000", "project_id": "project-0",
        "vm_state": "active", "task_state": None}
    assert cmp0000["migrations"] == [{
        "uuid": "77777777-0000-4000-8000-000000000000",
        "instance_uuid": "00000000-0000-4000-8000-000000000004", "source_host": "cmp0000",
        "dest_host": "cmp0001", "status": "running", "resources": {}}]
    assert facts[openstack.cloud.hypervisors[1]["id"]]["migrations"] == cmp0000["migrations"]
    assert cmp0000["cpu_features"] == [] and cmp0000["features"] == {}


def test_a_second_sync_writes_only_what_changed(openstack, sync_engine, sync_database_url):
    fill(openstack.cloud)
    assert nova(sync_engine, openstack, sync_database_url).ok
    unchanged = nova(sync_engine, openstack, sync_database_url)
    assert unchanged.ok and unchanged.changed == 0

    cloud = openstack.cloud
    gone = cloud.servers[0]["id"]
    cloud.delete_server(gone)
    moved = cloud.servers[10]
    moved.update({"OS-EXT-SRV-ATTR:host": "cmp0000", "updated": now_iso()})
    cloud.add_server("11111111-0000-4000-8000-000000000000", "cmp0001", updated=now_iso())
    changed = nova(sync_engine, openstack, sync_database_url)
    assert changed.ok
    servers = table(sync_engine, models.Server)
    assert gone not in servers and "11111111-0000-4000-8000-000000000000" in servers
    assert servers[moved["id"]]["host"] == "cmp0000"
    with sync_engine.connect() as c:
        detail = c.execute(select(models.SyncStatus.detail)).scalar_one()
    assert detail["tables"]["servers"] == {"rows": SERVERS, "upserted": 2, "deleted": 1}
    # only Nova's changes were read: the moved and the new server, the deleted one
    assert detail["changes"]["mode"] == "changes"
    assert (detail["servers_changed"], detail["servers_deleted"]) == (2, 1)

    # a deleted server archived out of Nova's database before a run saw it: the
    # changes cannot show it, the next full read drops it
    archived = cloud.servers.pop(0)["id"]
    assert nova(sync_engine, openstack, sync_database_url).changed == 0
    assert archived in table(sync_engine, models.Server)
    full = run_source(sync_engine, build_sources(sync_conf(
        sync_database_url, openstack, sync__full_sync_interval=0), ("nova",))[0])
    assert full.ok and full.changed > 0
    assert archived not in table(sync_engine, models.Server)


def test_an_older_nova_is_read_at_its_own_microversion(openstack, sync_engine,
                                                       sync_database_url):
    fill(openstack.cloud)
    openstack.cloud.nova_max_microversion = "2.60"
    result = nova(sync_engine, openstack, sync_database_url)
    assert result.ok, result.error
    assert {v for _, p, v in openstack.requests if p.startswith("/compute/v2.1/")} == {
        "compute 2.60"}
    # extra specs are not inline before 2.61: read per flavor
    assert sum(p.endswith("/os-extra_specs") for _, p, _ in openstack.requests) == 7
    assert table(sync_engine, models.Flavor)["6"]["extra_specs"] == {"hw:numa_nodes": "1"}
    group = table(sync_engine, models.ServerGroup)["616fb98f-46ca-475e-917e-2563e5a8cd19"]
    assert group["policy"] == "anti-affinity" and group["rules"] == {}
    hypervisor = table(sync_engine, models.Hypervisor)[openstack.cloud.hypervisors[0]["id"]]
    assert hypervisor["cpu_arch"] == "x86_64"  # cpu_info is still there before 2.88
    assert hypervisor["cpu_features"] == ["amx-tile", "avx512f", "vmx"]


def test_a_nova_older_than_2_53_is_refused_and_nothing_is_written(openstack, sync_engine,
                                                                  sync_database_url):
    fill(openstack.cloud)
    openstack.cloud.nova_max_microversion = "2.50"
    result = nova(sync_engine, openstack, sync_database_url)
    assert not result.ok and "2.53" in result.error
    assert count(sync_engine, models.Server) == 0


@pytest.mark.parametrize("page", ["marker=00000000-0000-4000-8000-000000001999"])
def test_a_failing_page_rolls_the_whole_snapshot_back(openstack, sync_engine, sync_database_url,
                                                      page):
    fill(openstack.cloud)
    assert nova(sync_engine, openstack, sync_database_url).ok
    before = table(sync_engine, models.Server)
    for server in openstack.cloud.servers:
        server["status"] = "SHUTOFF"
    openstack.cloud.servers = openstack.cloud.servers[:-100] + [copy.deepcopy(
        openstack.cloud.servers[0]) | {"id": "22222222-0000-4000-8000-000000000000"}]
    openstack.failures.add(f"/compute/v2.1/servers/detail?all_tenants=1&limit=1000&{page}")
    failed = nova(sync_engine, openstack, sync_database_url, sync__full_sync_interval=0)
    assert not failed.ok and "500" in failed.error
    assert table(sync_engine, models.Server) == before
    with sync_engine.connect() as c:
        status = c.execute(select(models.SyncStatus.__table__)).one()
        version = c.execute(select(models.KnowledgeVersion.version)).scalar_one()
    assert status.consecutive_failures == 1 and "servers/detail" in status.last_error
    assert status.rows > 0 and status.last_success_at is not None and version == 1
