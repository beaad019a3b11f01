"""The topology filters' own behaviour: options, applicability, health, reasons."""

from dataclasses import replace

import pytest

from cortex.knowledge.topology import placement_gpu_usage, topology_from_report
from cortex.pipeline.config import PipelineConfigError, build_pipelines
from cortex.plugins.filters.gpu_capacity import GpuCapacityFilter
from cortex.plugins.filters.gpu_health import GpuHealthFilter
from cortex.plugins.filters.numa_topology import NumaTopologyFilter
from cortex.plugins.filters.pci_numa_affinity import PciNumaAffinityFilter
from cortex.plugins.topology_options import TopologyOptions
from tests.fakes import host, nova
from tests.topology_fakes import cell, gpu, make_topology

PINNED_GPU = nova("gpu-2xh100-pinned")  # 32 pinned CPUs, 1 GiB pages, 2 H100 required


def with_topology(topology, name="h"):
    return replace(host(name), topology=topology)


@pytest.mark.parametrize("plugin", [NumaTopologyFilter, PciNumaAffinityFilter,
                                    GpuCapacityFilter, GpuHealthFilter])
def test_hosts_without_a_report_pass_unless_told(plugin):
    candidate = PINNED_GPU.candidates[0]
    assert plugin().check(host("h"), PINNED_GPU, candidate) is None
    strict = plugin(TopologyOptions(unknown_topology="fail"))
    assert strict.check(host("h"), PINNED_GPU, candidate) == "no topology report from cortex-agent"


def test_unknown_topology_option_is_validated_at_load():
    with pytest.raises(PipelineConfigError, match="unknown_topology"):
        build_pipelines({"defaults": {"nova": "p"}, "pipelines": {"p": {
            "service": "nova", "filters": [{"name": "filter_numa_topology",
                                            "options": {"unknown_topology": "maybe"}}]}}})


def test_filters_apply_only_to_what_they_judge():
    plain = nova("cpu-general-purpose")
    vgpu = nova("vgpu-mig-3g")
    assert not any(p().applies(plain) for p in (NumaTopologyFilter, PciNumaAffinityFilter,
                                                 GpuCapacityFilter, GpuHealthFilter))
    assert GpuCapacityFilter().applies(vgpu) and not NumaTopologyFilter().applies(vgpu)
    assert not PciNumaAffinityFilter().applies(nova("multi-create-anti-affinity"))
    assert all(p().applies(PINNED_GPU) for p in (NumaTopologyFilter, PciNumaAffinityFilter))


def h100_host(healthy=(True, True, True, True)):
    cells = [cell(0, cores=32, pages={1048576: (300, 0)}, memory=524288),
             cell(1, socket=1, cores=32, pages={1048576: (300, 0)}, memory=524288)]
    gpus = [gpu(f"0000:{a}:00.0", n, healthy=h)
            for (a, n), h in zip((("1b", 0), ("3b", 0), ("9b", 1), ("bb", 1)), healthy,
                                 strict=True)]
    return with_topology(make_topology(cells, gpus))


def test_health_filter_needs_enough_healthy_devices():
    candidate = PINNED_GPU.candidates[0]
    assert GpuHealthFilter().check(h100_host(), PINNED_GPU, candidate) is None
    assert GpuHealthFilter().check(h100_host((False, True, True, True)), PINNED_GPU,
                                   candidate) is None
    reason = GpuHealthFilter().check(h100_host((False, False, False, True)), PINNED_GPU,
                                     candidate)
    assert reason.startswith("h100: 1 free matching devices < 2")
    assert "0000:1b:00.0: retired pages pending" in reason
    # capacity alone does not look at health
    assert GpuCapacityFilter().check(h100_host((False, False, False, True)), PINNED_GPU,
                                     candidate) is None


def test_reasons_say_what_is_missing():
    candidate = PINNED_GPU.candidates[0]
    no_pages = with_topology(make_topology([cell(0, cores=32)], [gpu("0000:1b:00.0", 0)] * 1))
    assert NumaTopologyFilter().check(no_pages, PINNED_GPU, candidate) == (
        "guest cell 0 fits no host cell: cell 0: no 1048576 KiB pages")
    split = h100_host()
    split = replace(split, topology=make_topology(
        [cell(0, cores=32, pages={1048576: (300, 0)}, memory=524288),
         cell(1, socket=1, cores=32, pages={1048576: (300, 0)}, memory=524288)],
        [gpu("0000:1b:00.0", 0), gpu("0000:9b:00.0", 1)]))
    assert PciNumaAffinityFilter().check(split, PINNED_GPU, candidate) == (
        "h100: numa_policy required: 1 of the free devices qualify for host cells 1, 2 needed")


def test_topology_precomputes_what_filters_read():
    report = {"numa_cells": [cell(0, pinned="0-2"), cell(1, socket=None, smt=False)],
              "gpus": [gpu("0000:1b:00.0", 0), gpu("0000:3b:00.0", 0, in_use=True),
                       gpu("0000:9b:00.0", 1, mig=[("3g.40gb", False), ("3g.40gb", True),
                                                    ("1g.10gb", False)])],
              "gpu_links": [{"a": "0000:1b:00.0", "b": "0000:3b:00.0", "nvlink": 12,
                             "p2p_nvlink": "OK", "topology": "NODE"}]}
    topology = topology_from_report(report)
    assert [g.pci_address for g in topology.free_gpus] == ["0000:1b:00.0"]
    assert dict(topology.free_mig) == {"3g.40gb": 1, "1g.10gb": 1}
    assert topology.has_threads and not topology.sockets_known
    assert topology.nvlink_islands[0] == {"0000:1b:00.0", "0000:3b:00.0"}
    assert topology.link("0000:3b:00.0", "0000:1b:00.0").nvlink == 12
    first = topology.cell(0)
    assert (first.avail_pcpus, first.threads_per_core, first.cores_with_free) == (5, 2,
                                                                                  (4, 3, 2))


def test_placement_usage_overrides_by_pci_address():
    providers = [("cmp1.example_0000:1b:00.0", 1), ("cmp1.example_pci_0000_3b_00_0", 0),
                 ("cmp1.example_0000:9b:00.0", 0), ("other_0000:bb:00.0", 1),
                 ("cmp1.example", 7)]
    usage = placement_gpu_usage("cmp1.example", providers)
    assert usage == {"0000:1b:00.0": True, "0000:3b:00.0": False, "0000:9b:00.0": False}
    report = {"numa_cells": [cell(0)], "gpus": [gpu("0000:1b:00.0", 0),
                                                gpu("0000:3b:00.0", 0, in_use=True)]}
    topology = topology_from_report(report, placement_in_use=usage)
    assert [(g.in_use, g.in_use_source) for g in topology.gpus] == [
        (True, "placement"), (False, "placement")]
