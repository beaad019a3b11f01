"""Knowledge tables against the real database: fleet import, view loading, versioning."""

import pytest
from sqlalchemy import func, select

from cortex.db import models
from cortex.knowledge.loader import load_view, read_version
from cortex.store.fleet import FleetError, import_fleet, read_fleet
from tests.conftest import DEMO_FLEET

SMALL = {
    "aggregates": [{"name": "az-x", "uuid": "agg-1", "availability_zone": "az-x",
                    "metadata": {"filter_tenant_id": "p1"}, "hosts": ["h1"]}],
    "hosts": [
        {"host": "h1", "uuid": "u1", "hypervisor_type": "QEMU", "traits": ["CUSTOM_A"],
         "inventories": {"VCPU": {"total": 8, "allocation_ratio": 4.0, "used": 3}}},
        {"host": "h2", "node": "h2-node", "uuid": "u2", "availability_zone": "az-y",
         "enabled": False, "disabled_reason": "maintenance"},
        {"host": "vc", "node": "cluster-a", "uuid": "u3"},
        {"host": "vc", "node": "cluster-b", "uuid": "u4", "up": False},
    ],
    "storage_pools": [{"service": "cinder", "name": "c@b#p", "total_capacity_gb": 100,
                       "free_capacity_gb": 40, "capabilities": {"QoS_support": True}}],
}


def test_import_builds_the_view(db):
    before = read_version(db)
    counts = import_fleet(db, SMALL)
    assert counts == {"hosts": 4, "aggregates": 1, "storage_pools": 1}
    view = load_view(db)
    assert view.version == before + 1
    assert set(view.hosts) == {"h1", "h2", "vc"}
    h1 = view.hosts["h1"]
    assert h1.availability_zone == "az-x"  # from its AZ aggregate
    assert h1.aggregates[0].metadata["filter_tenant_id"] == "p1"
    assert h1.aggregates[0].metadata["availability_zone"] == "az-x"
    vcpu = h1.nodes["h1"].inventories["VCPU"]
    assert (vcpu.capacity, vcpu.free, vcpu.max_unit) == (32.0, 29.0, 8)
    assert "CUSTOM_A" in h1.traits
    assert view.hosts["h2"].availability_zone == "az-y"
    assert view.hosts["h2"].disabled_reason == "maintenance" and not view.hosts["h2"].enabled
    assert set(view.hosts["vc"].nodes) == {"cluster-a", "cluster-b"}
    assert not view.hosts["vc"].up  # one node's service down: the host is not up
    assert view.pools["cinder"]["c@b#p"].capabilities == {"QoS_support": True}


def test_import_replaces_the_previous_snapshot(db):
    import_fleet(db, SMALL)
    import_fleet(db, {"hosts": [{"host": "only", "uuid": "u9"}]})
    view = load_view(db)
    assert list(view.hosts) == ["only"] and view.pools == {}
    assert db.execute(select(func.count()).select_from(models.Aggregate)).scalar() == 0


def test_demo_fleet_is_valid_and_matches_fixture_names(db):
    import_fleet(db, read_fleet(DEMO_FLEET))
    view = load_view(db)
    assert {f"cmp{i:04d}" for i in range(50)} <= set(view.hosts)
    assert {f"nova-compute-bb{i:04d}" for i in range(8)} <= set(view.hosts)
    assert len(view.pools["cinder"]) == 6 and len(view.pools["manila"]) == 6


@pytest.mark.parametrize("text, message", [
    ("hosts: [{host: h}]", "'uuid' is a required property"),
    ("hosts: [{host: h, uuid: u, inventories: {VCPU: {total: -1}}}]", "-1 is less than"),
    ("hosts: [{host: h, uuid: u, colour: red}]", "Additional properties"),
    ("storage_pools: [{service: swift, name: p, total_capacity_gb: 1, free_capacity_gb: 1}]",
     "'swift' is not one of"),
    ("hosts: [", "expected"),
])
def test_bad_fleet_file_is_rejected_with_its_place(tmp_path, text, message):
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    with pytest.raises(FleetError) as info:
        read_fleet(path)
    assert message in str(info.value)


def test_failed_import_leaves_previous_snapshot(db):
    import_fleet(db, SMALL)
    duplicate = {"hosts": [{"host": "a", "uuid": "same"}, {"host": "b", "uuid": "same"}]}
    savepoint = db.begin_nested()
    with pytest.raises(Exception):  # noqa: B017 - the driver's IntegrityError
        import_fleet(db, duplicate)
    savepoint.rollback()
    assert set(load_view(db).hosts) == {"h1", "h2", "vc"}


FACTS = {
    "hosts": [
        {"host": "h", "uuid": "u1", "features": {"cpu.busy": 0.5, "cpu.steal": 0.02},
         "cpu_features": ["avx2", "vmx", "aes"], "failed_builds": 1,
         "allowed_projects": ["p1"],
         "instances": [{"uuid": "i1", "project_id": "p1", "task_state": "image_snapshot",
                        "cpu_busy": 0.9}, {"uuid": "i2"}],
         "migrations": [{"uuid": "m1", "instance_uuid": "i3", "source_host": "x",
                         "dest_host": "h", "status": "running",
                         "resources": {"VCPU": 4, "MEMORY_MB": 8192}}]},
        # a second node of a host with facts: CPU flags intersect, builds add up,
        # features merge, instances and migrations are listed once
        {"host": "vc", "node": "a", "uuid": "u2", "cpu_features": ["avx2", "vmx"],
         "failed_builds": 1, "features": {"cpu.busy": 0.1},
         "instances": [{"uuid": "i9"}], "migrations": [{"uuid": "m9", "status": "queued"}]},
        {"host": "vc", "node": "b", "uuid": "u3", "cpu_features": ["avx2"],
         "failed_builds": 2, "features": {"cpu.contention": 0.3},
         "instances": [{"uuid": "i9"}], "migrations": [{"uuid": "m9", "status": "queued"}]},
        {"host": "bare", "uuid": "u4"},
    ],
    "storage_pools": [{"service": "manila", "name": "s@b#p", "total_capacity_gb": 100,
                       "free_capacity_gb": 40, "features": {"cpu.busy": 0.7},
                       "resource_count": 12, "availability_zone": "eu-de-1a",
                       "availability_zone_id": "9ed89edd-d684-4325-b600-e6129ec04ece"}],
}


def test_host_and_pool_facts_round_trip(db):
    import_fleet(db, FACTS)
    view = load_view(db)
    h = view.hosts["h"]
    assert dict(h.features) == {"cpu.busy": 0.5, "cpu.steal": 0.02}
    assert h.cpu_features == {"avx2", "vmx", "aes"} and h.failed_builds == 1
    assert h.allowed_projects == {"p1"}
    assert [(i.uuid, i.project_id, i.task_state, i.cpu_busy) for i in h.instances] == [
        ("i1", "p1", "image_snapshot", 0.9), ("i2", None, None, 0.0)]
    (m,) = h.migrations
    assert (m.dest_host, m.status, dict(m.resources)) == ("h", "running",
                                                          {"VCPU": 4, "MEMORY_MB": 8192})
    vc = view.hosts["vc"]
    assert vc.cpu_features == {"avx2"} and vc.failed_builds == 3
    assert dict(vc.features) == {"cpu.busy": 0.1, "cpu.contention": 0.3}
    assert [i.uuid for i in vc.instances] == ["i9"] and [m.uuid for m in vc.migrations] == ["m9"]
    bare = view.hosts["bare"]
    assert (dict(bare.features), bare.cpu_features, bare.instances, bare.migrations,
            bare.failed_builds, bare.allowed_projects) == ({}, frozenset(), (), (), 0, frozenset())
    pool = view.pools["manila"]["s@b#p"]
    assert dict(pool.features) == {"cpu.busy": 0.7} and pool.resource_count == 12
    assert pool.availability_zone_id == "9ed89edd-d684-4325-b600-e6129ec04ece"


def test_rows_written_without_the_new_columns_get_empty_facts(db):
    from sqlalchemy import text

    db.execute(text("INSERT INTO compute_nodes (host, node, uuid, enabled, up, traits) "
                    "VALUES ('old', 'old', 'u-old', true, true, '[]')"))
    state = load_view(db).hosts["old"]
    assert (dict(state.features), state.instances, state.failed_builds) == ({}, (), 0)


@pytest.mark.parametrize("host, message", [
    ({"features": {"cpu.busy": "high"}}, "'high' is not of type 'number'"),
    ({"instances": [{"project_id": "p"}]}, "'uuid' is a required property"),
    ({"migrations": [{"uuid": "m", "status": "running", "resources": {"VCPU": -1}}]},
     "-1 is less than the minimum of 0"),
    ({"failed_builds": -1}, "-1 is less than the minimum of 0"),
])
def test_bad_facts_are_rejected(tmp_path, host, message):
    import yaml

    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump({"hosts": [{"host": "h", "uuid": "u"} | host]}))
    with pytest.raises(FleetError) as info:
        read_fleet(path)
    assert message in str(info.value)
