"""The topology file in the knowledge tables, and aggregates that place hosts before it."""

from sqlalchemy import insert

from cortex.cmd import manage
from cortex.db import models
from cortex.knowledge.loader import load_view
from cortex.knowledge.network import read_topology_file
from cortex.store.network import store_topology
from tests.conftest import REPO

TOPOLOGY = REPO / "etc" / "cortex" / "network-topology.yaml"


def test_the_file_loads_into_the_view_with_its_source(db):
    counts = store_topology(db, read_topology_file(TOPOLOGY))
    assert counts == {"spines": 2, "leaves": 5, "hosts": 20}
    network = load_view(db).network
    assert network.locations["cmp0000"].leaf == "leaf-01"
    assert network.locations["cmp0000"].block == "nvl-a"
    assert network.locations["cmp0000"].source == "file"
    assert network.leaves["leaf-02"].adjacent == {"leaf-01", "leaf-03"}
    assert network.leaves["leaf-04"].adjacent == {"leaf-05"}  # same spine, none stated
    assert network.spines["spine-1"] == 3200.0


def test_aggregate_metadata_places_a_host_before_the_file(db):
    store_topology(db, read_topology_file(TOPOLOGY))
    aggregate_id = db.execute(insert(models.Aggregate).values(
        uuid="a9a9a9a9-0000-0000-0000-000000000001", name="rack-77",
        metadata_={"topology:leaf": "rack-77", "topology:spine": "spine-2"})
        .returning(models.Aggregate.id)).scalar_one()
    db.execute(insert(models.AggregateHost).values(aggregate_id=aggregate_id, host="cmp0000"))
    network = load_view(db).network
    assert (network.locations["cmp0000"].leaf, network.locations["cmp0000"].source) == (
        "rack-77", "aggregate")
    assert network.locations["cmp0001"].source == "file"


def test_loading_again_replaces_the_file(db):
    store_topology(db, read_topology_file(TOPOLOGY))
    store_topology(db, {"spines": {}, "leaves": {"only": {"hosts": ["cmp0049"]}}})
    assert set(load_view(db).network.locations) == {"cmp0049"}


def test_manage_refuses_a_bad_file(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("leaves: {l1: {hosts: [a], adjacent: [l2]}}\n")
    assert manage.main(["network", "load", str(bad)]) == 2
    assert "unknown adjacent leaf l2" in capsys.readouterr().err
