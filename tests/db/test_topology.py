"""Topology reports: agent output -> POST /v1/topology -> PostgreSQL -> the knowledge view."""

import copy
from datetime import datetime

import pytest
from sqlalchemy import delete, func, select

from cortex import conf
from cortex.api.app import create_app
from cortex.db import migrate, models
from cortex.db.engine import make_engine
from cortex.knowledge.loader import load_view, read_version
from cortex.knowledge.topology import topology_from_report
from cortex.store.fleet import FleetError, import_fleet, read_fleet, topology_report
from tests.conftest import DEMO_FLEET, _create_postgres_database, _drop_postgres_database
from tests.topology_fakes import agent_report, cell, gpu, layout_names


@pytest.fixture(scope="module")
def topology_engine(database_url, tmp_path_factory):
    """A database of its own, with one compute host per layout, so reports stay private."""
    url = _create_postgres_database("topology") if database_url.startswith("postgresql") \
        else f"sqlite:///{tmp_path_factory.mktemp('topology') / 'db.sqlite'}"
    engine = make_engine(url)
    migrate.upgrade(engine)
    with engine.begin() as connection:
        import_fleet(connection, {"hosts": [{"host": name, "uuid": f"uuid-{name}"}
                                            for name in layout_names()]})
    yield engine
    engine.dispose()
    if url.startswith("postgresql"):
        _drop_postgres_database(url)


@pytest.fixture(scope="module")
def topology_client(topology_engine):
    app = create_app(conf.load(environ={}, overrides={"api.auth_strategy": "noauth",
        "database.connection": topology_engine.url.render_as_string(False),
        "database.knowledge_check_interval": 0.0}), engine=topology_engine)
    yield app.test_client()
    app.extensions["cortex"].decisions.close()


@pytest.fixture(scope="module")
def l40s_report(tmp_path_factory):
    return agent_report("l40s-4gpu-pcie", tmp_path_factory.mktemp("l40s"))


def post(client, host, report, **headers):
    return client.post(f"/v1/topology/{host}", json=report, headers=headers)


@pytest.mark.parametrize("name", layout_names())
def test_round_trip_through_api_database_and_view(tmp_path, topology_client, topology_engine,
                                                  name):
    report = agent_report(name, tmp_path)
    with topology_engine.begin() as connection:  # the same report, posted by another test
        connection.execute(delete(models.HostTopology).where(models.HostTopology.host == name))
    before = read_version(topology_engine)
    response = post(topology_client, name, report, **{"X-Auth-Token": "agent-token"})
    assert response.status_code == 200, response.get_data(as_text=True)
    stored = response.get_json()
    assert (stored["gpus"], stored["numa_cells"]) == (len(report["gpus"]),
                                                     len(report["numa_cells"]))
    assert stored["knowledge_changed"] is True
    assert read_version(topology_engine) == before + 1
    shown = topology_client.get(f"/v1/topology/{name}").get_json()
    reported_at = shown.pop("reported_at")
    assert shown == report
    view = load_view(topology_engine)
    expected = topology_from_report(report, datetime.fromisoformat(reported_at))
    assert view.hosts[name].topology == expected
    assert view.hosts[name].topology.free_gpus == expected.free_gpus


def test_a_repeated_report_does_not_move_the_knowledge_version(
        l40s_report, topology_client, topology_engine, tmp_path):
    other = next(n for n in layout_names() if n != "l40s-4gpu-pcie")  # to be left alone
    assert post(topology_client, other, agent_report(other, tmp_path)).status_code == 200
    assert post(topology_client, "l40s-4gpu-pcie", l40s_report).status_code == 200
    first = load_view(topology_engine)
    again = dict(l40s_report, collected_at="2026-11-21T12:01:00Z", guests=0)
    answer = post(topology_client, "l40s-4gpu-pcie", again).get_json()
    assert answer["knowledge_changed"] is False
    assert read_version(topology_engine) == first.version
    assert topology_client.get("/v1/topology/l40s-4gpu-pcie").get_json()["collected_at"] == \
        "2026-11-21T12:01:00Z"
    busy = copy.deepcopy(l40s_report)
    busy["gpus"][0]["in_use"] = True
    assert post(topology_client, "l40s-4gpu-pcie", busy).get_json()["knowledge_changed"]
    second = load_view(topology_engine, previous=first)
    assert second.version == first.version + 1
    assert second.hosts["l40s-4gpu-pcie"].topology.gpus[0].in_use
    unchanged = [h for h in first.hosts if h != "l40s-4gpu-pcie"
                 and first.hosts[h].topology is not None]
    assert unchanged and all(second.hosts[h].topology is first.hosts[h].topology
                             for h in unchanged)  # reused, not rebuilt


def test_a_new_report_replaces_the_old_one(tmp_path, topology_client, topology_engine):
    report = agent_report("dgx-a100-8gpu", tmp_path)
    assert post(topology_client, "dgx-a100-8gpu", report).status_code == 200
    smaller = copy.deepcopy(report)
    smaller["gpus"] = smaller["gpus"][:2]
    smaller["gpu_links"] = smaller["gpu_links"][:1]
    assert post(topology_client, "dgx-a100-8gpu", smaller).status_code == 200
    topology = load_view(topology_engine).hosts["dgx-a100-8gpu"].topology
    assert len(topology.gpus) == 2 and len(topology.links) == 2
    with topology_engine.connect() as connection:
        rows = connection.execute(select(func.count()).select_from(models.Gpu).join(
            models.HostTopology).where(models.HostTopology.host == "dgx-a100-8gpu")).scalar()
    assert rows == 2


@pytest.mark.parametrize("change, detail", [
    (lambda r: r["gpu_links"].append(dict(r["gpu_links"][0])), "appears twice"),
    (lambda r: r["gpu_links"].append({"a": "0000:01:00.0", "b": "0000:ff:00.0"}),
     "does not join two GPUs"),
    (lambda r: r["numa_cells"].append(dict(r["numa_cells"][0])), "cell 0 appears twice"),
    (lambda r: r["numa_cells"][0].update(pinned_cpus="500"), "outside the cell's CPUs"),
    (lambda r: r["gpus"][0].update(numa_node=7), "is not a NUMA cell"),
    (lambda r: r["gpus"].append(dict(r["gpus"][0])), "appears twice"),
    (lambda r: r["gpus"][0]["mig"]["instances"].extend([
        {"id": 1, "profile_id": 0, "profile": "1g.10gb"}] * 2), "duplicate MIG"),
    (lambda r: r.update(host="someone-else"), "not 'l40s-4gpu-pcie'"),
    (lambda r: r["numa_cells"][0].update(cpus="0-3,x"), "does not match"),
    # found by the fuzz test: a huge range used to be expanded in memory (OOM)
    (lambda r: r["numa_cells"][0].update(cpus="0-4000000000"), "above 65535"),
    # found by the fuzz test: an int32 column overflowed into a 503
    (lambda r: r["numa_cells"][0].update(cpu_usage=2147483648), "cannot be stored"),
    (lambda r: r["gpus"][0].update(pci_address="01:00.0"), "does not match"),
    (lambda r: r.pop("numa_cells"), "'numa_cells' is a required property"),
    (lambda r: r["gpu_links"][0].update(topology="FAR"), "is not one of"),
])
def test_bad_reports_are_refused_and_change_nothing(l40s_report, topology_client,
                                                    topology_engine, change, detail):
    good = copy.deepcopy(l40s_report)
    assert post(topology_client, "l40s-4gpu-pcie", good).status_code == 200
    version = read_version(topology_engine)
    bad = copy.deepcopy(good)
    change(bad)
    response = post(topology_client, "l40s-4gpu-pcie", bad)
    assert response.status_code == 400
    error = response.get_json()["errors"][0]
    assert detail in error["detail"] and "Traceback" not in error["detail"]
    assert read_version(topology_engine) == version
    shown = topology_client.get("/v1/topology/l40s-4gpu-pcie").get_json()
    shown.pop("reported_at")
    assert shown == good


def test_reports_from_hosts_nova_does_not_know_are_kept_out_of_the_view(
        tmp_path, topology_client, topology_engine):
    report = agent_report("gh200", tmp_path, host="not-a-compute-host")
    assert post(topology_client, "not-a-compute-host", report).status_code == 200
    assert "not-a-compute-host" not in load_view(topology_engine).hosts
    assert topology_client.get("/v1/topology/not-a-compute-host").status_code == 200
    # with [kubernetes] nodes_from_reports it is a Kubernetes node, sized by its report
    node = load_view(topology_engine, kubernetes_nodes=True).hosts["not-a-compute-host"]
    cpus = sum(len(c.cpus) for c in node.topology.cells)
    assert node.enabled and node.up and node.availability_zone is None
    assert node.all_nodes[0].inventories["VCPU"].total == cpus > 0
    assert node.all_nodes[0].inventories["MEMORY_MB"].total == sum(
        c.memory for c in node.topology.cells)


def test_show_unknown_host_is_404(topology_client):
    response = topology_client.get("/v1/topology/nobody")
    assert response.status_code == 404 and response.get_json()["errors"][0]["status"] == 404


def test_wrong_method_and_content_type(topology_client):
    assert topology_client.put("/v1/topology/x").status_code == 405
    response = topology_client.post("/v1/topology/x", data="{}", content_type="text/plain")
    assert response.status_code == 415
    response = topology_client.post("/v1/topology/x", data="{", content_type="application/json")
    assert response.status_code == 400
    assert topology_client.post("/v1/topology/" + "h" * 256, json={}).status_code == 400


# ------------------------------------------------------------------ the fleet file

BASE = {"numa_cells": [cell(0, memory=16384), cell(1, socket=1, memory=16384)],
        "gpus": [gpu("0000:1b:00.0", 0), gpu("0000:9b:00.0", 1,
                                              mig=[("3g.40gb", False), ("3g.40gb", False)])],
        "gpu_links": []}


def fleet_with(topology):
    return {"hosts": [{"host": "g1", "uuid": "u-g1", "topology": topology}]}


def test_fleet_topology_with_usage(db):
    import_fleet(db, fleet_with({
        "report": BASE, "gpus_in_use": ["0000:1b:00.0"], "mig_in_use": {"0000:9b:00.0": [2]},
        "cells": {"1": {"pinned_cpus": "8-9", "cpu_usage": 3, "memory_usage_mb": 1024,
                        "hugepages": {"1048576": {"total": 4, "used": 1}}}}}))
    topology = load_view(db).hosts["g1"].topology
    first, second = topology.gpus
    assert (first.in_use, first.in_use_source) == (True, "fleet")
    assert [i.in_use for i in second.mig_instances] == [False, True]
    cell1 = topology.cell(1)
    assert cell1.pinned_cpus == {8, 9} and (cell1.cpu_usage, cell1.memory_usage) == (3, 1024)
    assert cell1.pages(1048576).free == 3
    assert cell1.pages(4).total == (16384 - 4096) * 256  # huge pages leave the 4 KiB pool
    assert BASE["numa_cells"][1]["pinned_cpus"] == ""  # the shared report is not modified


@pytest.mark.parametrize("topology, message", [
    ({"report": BASE, "gpus_in_use": ["0000:ff:00.0"]}, "no GPU 0000:ff:00.0"),
    ({"report": BASE, "mig_in_use": {"0000:9b:00.0": [9]}}, "no MIG instance 9"),
    ({"report": BASE, "cells": {"5": {"cpu_usage": 1}}}, "no NUMA cell 5"),
    ({"report": "by-name-only"}, "was not resolved"),
])
def test_fleet_topology_errors(topology, message):
    with pytest.raises(FleetError, match=message):
        topology_report(topology)


def test_inconsistent_fleet_topology_fails_the_import(db):
    bad = copy.deepcopy(BASE)
    bad["gpus"][0]["numa_node"] = 4
    savepoint = db.begin_nested()
    with pytest.raises(FleetError, match="host g1: topology: .*not a NUMA cell"):
        import_fleet(db, fleet_with({"report": bad}))
    savepoint.rollback()


def test_unknown_report_name_in_a_fleet_file(tmp_path):
    path = tmp_path / "fleet.yaml"
    path.write_text("hosts: [{host: h, uuid: u, topology: {report: nowhere}}]")
    with pytest.raises(FleetError, match="topology report 'nowhere'"):
        read_fleet(path)


def test_demo_fleet_gpu_hosts_have_topology(db):
    import_fleet(db, read_fleet(DEMO_FLEET))
    hosts = load_view(db).hosts
    with_topology = {h for h, s in hosts.items() if s.topology is not None}
    assert with_topology == {"cmp0000", "cmp0001", "cmp0002", "cmp0003", "cmp0004", "cmp0005",
                             "cmp0008", "cmp0009", "cmp0010", "cmp0011", "cmp0012", "cmp0014",
                             "cmp0015", "cmp0016", "cmp0047"}
    # agent's view of GPUs in use agrees with Placement's usage in the same file
    for name in with_topology:
        state = hosts[name]
        inventories = next(iter(state.nodes.values())).inventories
        used = [i.used for rc, i in inventories.items() if rc.startswith("CUSTOM_PCI_")]
        if used:
            assert used[0] == sum(g.in_use for g in state.topology.gpus), name
        if "VGPU" in inventories:
            taken = sum(i.in_use for g in state.topology.gpus for i in g.mig_instances)
            assert inventories["VGPU"].used == taken, name


def test_placement_child_providers_decide_which_gpus_are_in_use(db):
    """Placement's ``<node>_<pci address>`` providers override the agent's view."""
    from sqlalchemy import insert, select

    from cortex.db import models
    from cortex.knowledge.loader import load_view
    from cortex.store.fleet import import_fleet, read_fleet
    from tests.conftest import DEMO_FLEET

    import_fleet(db, read_fleet(DEMO_FLEET))
    before = {g.pci_address: g for g in load_view(db).hosts["cmp0002"].topology.gpus}
    assert before["0000:17:00.0"].in_use and not before["0000:b1:00.0"].in_use
    root = db.execute(select(models.ComputeNode.uuid).where(
        models.ComputeNode.host == "cmp0002")).scalar_one()
    node = "cmp0002.cloud.example"
    providers = [(root, node, None, 0), ("child-17", f"{node}_0000:17:00.0", root, 0),
                 ("child-b1", f"{node}_0000:b1:00.0", root, 1)]
    for uuid, name, parent, used in providers:
        db.execute(insert(models.ResourceProvider).values(
            uuid=uuid, name=name, generation=1, root_provider_uuid=root,
            parent_provider_uuid=parent))
        if parent:
            db.execute(insert(models.ProviderInventory).values(
                provider_uuid=uuid, resource_class="CUSTOM_PCI_10DE_20B5", total=1,
                reserved=0, min_unit=1, max_unit=1, step_size=1, allocation_ratio=1.0,
                used=used))
    after = {g.pci_address: g for g in load_view(db).hosts["cmp0002"].topology.gpus}
    assert not after["0000:17:00.0"].in_use and after["0000:17:00.0"].in_use_source == "placement"
    assert after["0000:b1:00.0"].in_use and after["0000:b1:00.0"].in_use_source == "placement"
    assert after["0000:ca:00.0"].in_use == before["0000:ca:00.0"].in_use  # not in Placement


def test_topologies_built_from_rows_equal_those_built_from_the_reports(db):
    """The loader's row path gives what topology_from_report gives for the same reports."""
    from cortex.knowledge.reports import load_topologies, read_reports

    import_fleet(db, read_fleet(DEMO_FLEET))
    documents = read_reports(db)
    expected = {h: topology_from_report(d, d["reported_at"]) for h, d in documents.items()}
    built = load_topologies(db)
    assert built == expected
    assert load_topologies(db, ["cmp0002", "cmp0047", "nowhere"]) == {
        h: expected[h] for h in ("cmp0002", "cmp0047")}
    # hosts of one model share their link map, and equal cells are one object
    hgx = [t for t in built.values() if len(t.gpus) == 8 and t.nvlink_islands[0] == frozenset(
        g.pci_address for g in t.gpus)]
    assert len(hgx) >= 2 and hgx[0].links is hgx[1].links
    cells = [c for t in built.values() for c in t.cells]
    assert len({id(c) for c in cells}) < len(cells)
