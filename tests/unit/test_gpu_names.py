"""How a GPU model is named for demand (cortex.knowledge.gpu_names, cortex.scheduler.demand)."""

import dataclasses
from types import SimpleNamespace

import pytest

from cortex.knowledge.gpu_names import ANY_MODEL, names_by_product
from cortex.scheduler import demand
from cortex.scheduler.demand import requested_model
from tests.fake_topology import hgx, topology_host
from tests.fakes import view

H100 = "NVIDIA H100 80GB HBM3"


def unnamed_hgx():
    """An HGX board whose GPUs carry their PCI ids but no NVML name (a fleet file's)."""
    board = hgx()
    return dataclasses.replace(board, gpus=tuple(dataclasses.replace(g, name=None)
                                                 for g in board.gpus))


def asking(*products):
    """A request as requested_model reads it: the PCI product ids its devices name."""
    return SimpleNamespace(gpu_products=frozenset(p.lower() for p in products))


@pytest.fixture
def fleet():
    return view(topology_host("named"), topology_host("unnamed", unnamed_hgx()))


def test_an_unnamed_gpu_takes_the_name_its_product_has_elsewhere_in_the_fleet(fleet):
    assert names_by_product(fleet) == {"2330": H100}
    assert requested_model(asking(), fleet, fleet.hosts["unnamed"]) == H100
    assert requested_model(asking("2330"), fleet, None) == H100, "refused: the product's name"
    assert requested_model(asking("20b5"), fleet, None) == ANY_MODEL
    assert requested_model(asking(), fleet, None) == ANY_MODEL


def test_a_named_gpu_is_named_without_walking_the_fleet(fleet, monkeypatch):
    def walked(_view):
        raise AssertionError("the fleet's names were built")

    monkeypatch.setattr(demand, "names_by_product", walked)
    assert requested_model(asking(), fleet, fleet.hosts["named"]) == H100
    assert requested_model(asking("2330"), fleet, fleet.hosts["named"]) == H100
    assert requested_model(asking(), fleet, None) == ANY_MODEL, "nothing asked, nothing named"


def test_the_names_are_built_once_per_knowledge_version(fleet):
    overlay = dataclasses.replace(fleet, base=fleet, overlaid=frozenset({"named"}))
    assert names_by_product(overlay) is names_by_product(fleet)
    later = view(topology_host("unnamed", unnamed_hgx()), version=2)
    assert names_by_product(later) == {}, "a new version is walked again"
