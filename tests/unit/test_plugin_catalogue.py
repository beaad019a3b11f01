"""Every in-tree plugin is documented, configurable, listed and used by a shipped pipeline."""

import dataclasses
import inspect
import json
import sys

import pytest

from cortex import conf
from cortex.cmd import manage
from cortex.pipeline.config import load_pipelines
from cortex.plugins.registry import FILTERS, WEIGHERS, load_all
from tests.conftest import REPO

load_all()
IN_TREE = sorted(
    (name, cls) for table in (FILTERS, WEIGHERS) for name, cls in table.items()
    if cls.__module__.startswith("cortex.plugins."))
SHIPPED = load_pipelines(conf.shipped_file("pipelines.yaml"))
PIPELINE_NAMES = ("kvm-general-purpose-load-balancing", "kvm-hana-bin-packing",
                  "kvm-gpu-bin-packing", "kvm-gpu-topology-aware", "kvm-gpu-cell-preserving",
                  "nova-baseline",
                  "vmware-general-purpose-load-balancing",
                  "vmware-hana-bin-packing", "cinder-external-scheduler",
                  "manila-external-scheduler", "kubernetes-gpu-topology-aware")


def test_the_catalogue_is_complete():
    # 19 filters and 18 weighers across Nova, Cinder and Manila; four topology filters
    # (GPU capacity and health, NUMA topology, PCI NUMA affinity); the GPU weighers
    # (affinity, fragmentation, NUMA locality, load, energy) and Nova's PCIWeigher for the
    # nova-baseline pipeline; the network domain filter and weigher; the cell-preserving
    # weigher; the commitment weigher and the failover room filter; Nova's
    # AggregateImagePropertiesIsolation and IsolatedHostsFilter; the GPU model reserve
    assert len([n for n, _ in IN_TREE if n.startswith("filter_")]) == 19 + 4 + 1 + 1 + 2
    weighers = [n for n, _ in IN_TREE if n.startswith("weigher_")]
    assert len(weighers) == 18 + 5 + 1 + 1 + 1 + 1 + 1 + 1


@pytest.mark.parametrize("name, cls", IN_TREE, ids=[n for n, _ in IN_TREE])
def test_plugin_is_documented(name, cls):
    doc = inspect.getdoc(sys.modules[cls.__module__])
    assert doc.startswith(f"{name}: "), "the module docstring names the plugin"
    assert any(word in doc for word in ("Nova", "Cinder", "Manila", "Placement",
                                        "reference implementation")), "states its source"
    assert "nvert" in doc or "multiplier" in doc, "says how to invert it"
    assert dataclasses.is_dataclass(cls.Options)
    assert cls.__doc__ and cls.check.__doc__ if name.startswith("filter_") else cls.weigh.__doc__


@pytest.mark.parametrize("name, cls", IN_TREE, ids=[n for n, _ in IN_TREE])
def test_plugin_is_used_by_a_shipped_pipeline(name, cls):
    used = {step.name for p in SHIPPED.pipelines.values() for step in p.filters + p.weighers}
    assert name in used


def test_shipped_pipelines_are_documented():
    assert set(SHIPPED.pipelines) == set(PIPELINE_NAMES)
    section = (REPO / "docs" / "scheduler" / "pipelines.md").read_text()
    for name in PIPELINE_NAMES:
        assert f"`{name}`" in section
    assert SHIPPED.defaults == {"nova": "kvm-general-purpose-load-balancing",
                                "cinder": "cinder-external-scheduler",
                                "manila": "manila-external-scheduler",
                                "kubernetes": "kubernetes-gpu-topology-aware"}


def test_plugins_list_shows_every_plugin_with_its_options(capsys):
    assert manage.main(["plugins", "list", "-f", "json"]) == 0
    listed = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    for name, cls in IN_TREE:
        assert listed[name]["kind"] == ("filter" if name.startswith("filter_") else "weigher")
        assert [o["name"] for o in listed[name]["options"]] == [
            field.name for field in dataclasses.fields(cls.Options)]
