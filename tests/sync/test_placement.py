"""The Placement and Nova sources against the real Placement server and the fake Nova.

The cloud is built through Placement's own API; after ``cortex-manage sync --once``
PostgreSQL must hold exactly what Placement's API answers (providers with their
trees, inventories with usages, traits, aggregates), and the knowledge tables
the API reads must show the same capacity.
"""

from __future__ import annotations

import functools

from sqlalchemy import select

from cortex.cmd import manage
from cortex.db import models
from cortex.sync.openstack import connect
from cortex.sync.runner import run_source
from cortex.sync.sources import build_sources
from tests.fake_openstack import now_iso
from tests.sync import cloud
from tests.sync.conftest import sync_conf


def placement_picture(placement) -> dict:
    """Everything Placement's API says, in the shape of the synced tables."""
    providers = placement.call("GET", "/resource_providers")["resource_providers"]
    picture = {"providers": {}, "inventories": {}, "traits": set(), "aggregates": set()}
    for p in providers:
        uuid = p["uuid"]
        picture["providers"][uuid] = (p["name"], p["generation"], p["root_provider_uuid"],
                                      p["parent_provider_uuid"])
        usages = placement.call("GET", f"/resource_providers/{uuid}/usages")["usages"]
        for rc, inv in placement.call(
                "GET", f"/resource_providers/{uuid}/inventories")["inventories"].items():
            picture["inventories"][(uuid, rc)] = (
                inv["total"], inv["reserved"], inv["min_unit"], inv["max_unit"],
                inv["step_size"], inv["allocation_ratio"], usages.get(rc, 0))
        picture["traits"] |= {(uuid, t) for t in placement.call(
            "GET", f"/resource_providers/{uuid}/traits")["traits"]}
        picture["aggregates"] |= {(uuid, a) for a in placement.call(
            "GET", f"/resource_providers/{uuid}/aggregates")["aggregates"]}
    return picture


def database_picture(engine) -> dict:
    with engine.connect() as c:
        return {
            "providers": {r.uuid: (r.name, r.generation, r.root_provider_uuid,
                                   r.parent_provider_uuid)
                          for r in c.execute(select(models.ResourceProvider.__table__))},
            "inventories": {(r.provider_uuid, r.resource_class): (
                r.total, r.reserved, r.min_unit, r.max_unit, r.step_size, r.allocation_ratio,
                r.used) for r in c.execute(select(models.ProviderInventory.__table__))},
            "traits": {tuple(r) for r in c.execute(select(models.ProviderTrait.__table__))},
            "aggregates": {tuple(r) for r in c.execute(
                select(models.ProviderAggregate.__table__))},
        }


def knowledge(engine) -> dict:
    """``{host: (enabled, up, zone, traits, {rc: (total, reserved, max_unit, ratio, used)})}``."""
    with engine.connect() as c:
        nodes = {r.id: r for r in c.execute(select(models.ComputeNode.__table__))}
        inventories = {}
        for r in c.execute(select(models.ResourceInventory.__table__)):
            inventories.setdefault(r.compute_node_id, {})[r.resource_class] = (
                r.total, r.reserved, r.max_unit, r.allocation_ratio, r.used)
    return {n.host: (n.enabled, n.up, n.availability_zone, set(n.traits),
                     inventories.get(i, {})) for i, n in nodes.items()}


def features(engine, source) -> dict:
    with engine.connect() as c:
        table = models.HostFeature.__table__
        return {(r.host, r.feature): r.value
                for r in c.execute(select(table).where(table.c.source == source))}


def write_config(tmp_path, database_url, fake) -> str:
    lines = ["[database]", f"connection = {database_url}", "[openstack]"]
    lines += [f"{k.split('.')[1]} = {v}" for k, v in fake.clouds_yaml_auth().items()]
    path = tmp_path / "cortex.conf"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_manage_sync_once_copies_placement_and_nova(placement, openstack, sync_engine,
                                                    sync_database_url, tmp_path, capsys):
    roots = cloud.build(placement, openstack.cloud)
    openstack.cloud.placement_url = placement.url
    h100 = cloud.children(placement, roots["cmp0000"])
    vgpus = cloud.children(placement, roots["cmp0003"])
    placement.allocate("a" * 8 + "-0000-0000-0000-" + "0" * 12, {
        roots["cmp0000"]: {"PCPU": 16, "MEMORY_MB": 65536, "DISK_GB": 100},
        h100[0]: {"CUSTOM_PCI_10DE_2330": 1}, h100[1]: {"CUSTOM_PCI_10DE_2330": 1}})
    placement.allocate("b" * 8 + "-0000-0000-0000-" + "0" * 12, {
        roots["cmp0003"]: {"VCPU": 8, "MEMORY_MB": 16384}, vgpus[2]: {"VGPU": 1}})
    config_file = write_config(tmp_path, sync_database_url, openstack)

    assert manage.main(["--config-file", config_file, "sync", "--once",
                        "--source", "placement", "--source", "nova"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("placement: ") and "\nnova: " in out

    assert database_picture(sync_engine) == placement_picture(placement)
    known = knowledge(sync_engine)
    assert set(known) == {"cmp0000", "cmp0001", "cmp0002", "cmp0003"}
    enabled, up, zone, traits, inventories = known["cmp0000"]
    assert (enabled, up, zone) == (True, True, "az-1")
    assert traits == {"COMPUTE_NODE", "HW_ARCH_X86_64", "HW_CPU_X86_AVX512F",
                      "CUSTOM_NVIDIA_H100_SXM5"}
    assert inventories == {
        "VCPU": (16, 0, 16, 2.0, 0), "PCPU": (200, 0, 200, 1.0, 16),
        "MEMORY_MB": (2097152, 65536, 2097152, 1.0, 65536), "DISK_GB": (3576, 0, 3576, 1.0, 100),
        "CUSTOM_PCI_10DE_2330": (8, 0, 8, 1.0, 2)}
    assert known["cmp0003"][4]["VGPU"] == (8, 0, 8, 1.0, 1)
    assert known["cmp0002"][:2] == (False, True)
    assert "COMPUTE_STATUS_DISABLED" in known["cmp0002"][3]
    with sync_engine.connect() as c:
        node = c.execute(select(models.ComputeNode.__table__).where(
            models.ComputeNode.host == "cmp0002")).one()
        assert node.disabled_reason == "hardware check" and node.uuid == roots["cmp0002"]
        assert node.cpu_arch is None  # no HW_ARCH_* trait, no cpu_info at 2.88+
        assert c.execute(select(models.ComputeNode.cpu_arch).where(
            models.ComputeNode.host == "cmp0000")).scalar_one() == "x86_64"
        members = c.execute(select(models.AggregateHost.host).order_by("host")).scalars().all()
        assert members == ["cmp0000", "cmp0001"]
    assert features(sync_engine, "placement") == {
        ("cmp0000", "gpu_devices"): 8, ("cmp0000", "gpu_devices_allocated"): 2,
        ("cmp0001", "gpu_devices"): 8, ("cmp0001", "gpu_devices_allocated"): 0,
        ("cmp0003", "gpu_devices"): 4, ("cmp0003", "gpu_devices_allocated"): 1}


def test_only_providers_whose_generation_moved_are_read_again(placement, openstack, sync_engine,
                                                              sync_database_url):
    roots = cloud.build(placement, openstack.cloud)
    openstack.cloud.placement_url = placement.url
    source, = build_sources(sync_conf(sync_database_url, openstack), ("placement",))
    first = run_source(sync_engine, source)
    assert first.ok and first.changed == first.rows > 0

    unchanged = run_source(sync_engine, source)
    assert unchanged.ok and unchanged.changed == 0
    with sync_engine.connect() as c:
        status = c.execute(select(models.SyncStatus.__table__).where(
            models.SyncStatus.source == "placement")).one()
        version = c.execute(select(models.KnowledgeVersion.version)).scalar_one()
    assert status.detail["providers_refreshed"] == 0 and status.rows == first.rows
    assert version == 1, "an unchanged snapshot must not bump the knowledge version"

    gpu = cloud.children(placement, roots["cmp0001"])[3]
    server = "c" * 8 + "-0000-0000-0000-" + "0" * 12
    cloud.boot(placement, openstack.cloud, server, "cmp0001",
               {roots["cmp0001"]: {"PCPU": 100}, gpu: {"CUSTOM_PCI_10DE_2330": 1}})
    gone = cloud.children(placement, roots["cmp0000"])[7]
    placement.call("DELETE", f"/resource_providers/{gone}")
    third = run_source(sync_engine, source)
    assert third.ok
    status = sync_status(sync_engine)
    # allocations moved the generations of the root and the GPU of cmp0001 only
    assert status.detail["providers_refreshed"] == 2
    assert status.detail["changes"]["mode"] == "changes"
    assert status.detail["changed_nodes"] == 1  # the new server's node
    assert status.detail["usages_refreshed"] == 9  # cmp0001's root and its eight GPUs
    assert knowledge_version(sync_engine) == 2
    assert database_picture(sync_engine) == placement_picture(placement)

    # Deleting a server frees its allocations without moving a generation: the
    # server, listed by Nova's changes-since as deleted, names the tree to read
    cloud.delete(placement, openstack.cloud, server)
    fourth = run_source(sync_engine, source)
    assert fourth.ok and fourth.changed > 0
    status = sync_status(sync_engine)
    assert status.detail["providers_refreshed"] == 0 and status.detail["usages_refreshed"] == 9
    assert knowledge_version(sync_engine) == 3
    assert database_picture(sync_engine) == placement_picture(placement)
    assert gone not in database_picture(sync_engine)["providers"]


def sync_status(engine):
    with engine.connect() as c:
        return c.execute(select(models.SyncStatus.__table__).where(
            models.SyncStatus.source == "placement")).one()


def knowledge_version(engine) -> int:
    with engine.connect() as c:
        return c.execute(select(models.KnowledgeVersion.version)).scalar_one()


def test_a_migration_names_both_nodes_and_full_reads_catch_what_changes_miss(
        placement, openstack, sync_engine, sync_database_url):
    roots = cloud.build(placement, openstack.cloud)
    openstack.cloud.placement_url = placement.url
    conf = sync_conf(sync_database_url, openstack)
    source, = build_sources(conf, ("placement",))
    assert run_source(sync_engine, source).ok
    # a cold migration's allocations as Nova leaves them before the confirm: the
    # migration record holds the source node's, the server the destination's
    migration = "e" * 8 + "-0000-0000-0000-" + "0" * 12
    placement.allocate(migration, {roots["cmp0000"]: {"PCPU": 50}})
    placement.allocate("f" * 8 + "-0000-0000-0000-" + "0" * 12, {roots["cmp0001"]: {"PCPU": 50}})
    assert run_source(sync_engine, source).ok
    assert database_picture(sync_engine) == placement_picture(placement)
    # the confirm frees the source's allocation (no generation moves) and updates the
    # migration record, which names both nodes
    placement.free(migration)
    openstack.cloud.migrations.append({
        "id": 7, "uuid": migration, "instance_uuid": "f" * 8 + "-0000-0000-0000-" + "0" * 12,
        "migration_type": "migration", "status": "confirmed",
        "source_compute": "cmp0000", "source_node": cloud.node("cmp0000"),
        "dest_compute": "cmp0001", "dest_node": cloud.node("cmp0001"),
        "created_at": now_iso(), "updated_at": now_iso()})
    assert run_source(sync_engine, source).ok
    status = sync_status(sync_engine)
    assert status.detail["changed_nodes"] == 2 and status.detail["providers_refreshed"] == 0
    assert database_picture(sync_engine) == placement_picture(placement)

    # an allocation freed with no trace in Nova (another service's consumer) on a node
    # Nova's changes do not name is not read between full reads; a full read sees it
    placement.allocate("a" * 8 + "-1111-0000-0000-" + "0" * 12, {roots["cmp0003"]: {"VCPU": 2}})
    assert run_source(sync_engine, source).ok
    placement.free("a" * 8 + "-1111-0000-0000-" + "0" * 12)
    assert run_source(sync_engine, source).changed == 0
    assert database_picture(sync_engine) != placement_picture(placement)
    full, = build_sources(sync_conf(sync_database_url, openstack,
                                    sync__full_sync_interval=0), ("placement",))
    result = run_source(sync_engine, full)
    assert result.ok and result.changed > 0
    assert sync_status(sync_engine).detail["changes"]["mode"] == "full"
    assert database_picture(sync_engine) == placement_picture(placement)


def two_readers(placement, openstack, database_url, monkeypatch):
    """The placement source of a built cloud, dividing even a small read between 2 processes."""
    from cortex.sync.sources import placement as placement_source

    cloud.build(placement, openstack.cloud)
    openstack.cloud.placement_url = placement.url
    monkeypatch.setattr(placement_source, "MIN_PER_PROCESS", 1)
    source, = build_sources(sync_conf(database_url, openstack, sync__placement_processes=2),
                            ("placement",))
    return source


def test_reading_processes_divide_a_full_read_and_write_what_one_process_would(
        placement, openstack, sync_engine, sync_database_url, monkeypatch):
    """Two spawned processes, each with its own connection, read the providers' details."""
    source = two_readers(placement, openstack, sync_database_url, monkeypatch)
    first = run_source(sync_engine, source)
    assert first.ok, first.error
    assert sync_status(sync_engine).detail["reading_processes"] == 2
    assert database_picture(sync_engine) == placement_picture(placement)


def test_a_reading_process_that_cannot_connect_fails_the_run_and_writes_nothing(
        placement, openstack, sync_engine, sync_database_url, monkeypatch):
    source = two_readers(placement, openstack, sync_database_url, monkeypatch)
    # the readers connect from their own copy of the configuration: break only theirs
    source._connect = functools.partial(connect, sync_conf(
        sync_database_url, openstack, openstack__auth_url="http://127.0.0.1:9/identity/v3"))
    result = run_source(sync_engine, source)
    assert not result.ok and "a reading process could not connect" in result.error
    assert database_picture(sync_engine)["providers"] == {}
