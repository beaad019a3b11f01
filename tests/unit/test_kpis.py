"""Fleet KPIs from a knowledge view: utilization, GPUs per model, stranded GPUs."""

import pytest

from cortex.knowledge import kpis
from tests.fakes import host, inventory, view

H100 = "CUSTOM_PCI_10DE_2330"


def gpu_host(name, total=8, used=0, az="az-1", rc=H100, **kwargs):
    return host(name, az=az, inventories={"VCPU": inventory(64, used=16, ratio=2.0),
                                          "MEMORY_MB": inventory(1024, used=512, reserved=24),
                                          rc: inventory(total, used=used)}, **kwargs)


@pytest.mark.parametrize("rc, traits, model", [
    (H100, (), "H100 SXM5 80GB"),
    ("CUSTOM_PCI_10DE_20B5", (), "A100 PCIe 80GB"),
    ("CUSTOM_PCI_10DE_26B9", (), "L40S"),
    ("CUSTOM_PCI_10DE_FFFF", (), "PCI 10DE:FFFF"),
    ("VGPU", ("CUSTOM_NVIDIA_A100_3G_40GB", "COMPUTE_NODE"), "vGPU A100_3G_40GB"),
    ("VGPU", (), "vGPU"),
    ("VCPU", (), None),
    ("CUSTOM_PCI_NIC", (), None),
])
def test_gpu_model_names(rc, traits, model):
    assert kpis.gpu_model(rc, traits) == model


def test_host_usage_follows_placement_capacity():
    usage = kpis.host_usage(gpu_host("h1", used=2))
    assert list(usage)[:2] == ["VCPU", "MEMORY_MB"]  # main classes first
    assert usage["VCPU"] == kpis.Usage(16, 128.0) and usage["VCPU"].ratio == 0.125
    assert usage["MEMORY_MB"].ratio == 512 / 1000
    assert usage[H100].ratio == 0.25
    assert kpis.Usage(1, 0).ratio is None


def test_zone_usage_sums_before_dividing():
    fleet = view(gpu_host("a", used=8), gpu_host("b", used=0, total=8),
                 gpu_host("c", used=4, az="az-2"))
    usage = kpis.zone_usage(fleet)
    assert usage["az-1", H100] == kpis.Usage(8, 16) and usage["az-2", H100].ratio == 0.5


def test_free_gpus_count_only_schedulable_hosts():
    fleet = view(gpu_host("a", used=2), gpu_host("b", used=1, enabled=False),
                 gpu_host("c", used=0, up=False), gpu_host("d", used=3, az="az-2"))
    counts = {(c.model, c.availability_zone): (c.free, c.used) for c in kpis.gpu_counts(fleet)}
    assert counts == {("H100 SXM5 80GB", "az-1"): (6, 3), ("H100 SXM5 80GB", "az-2"): (5, 3)}


# free GPUs per host -> stranded for 4 and for 8
@pytest.mark.parametrize("free_per_host, stranded4, stranded8", [
    ([8], 0, 0),                # a whole free host serves both
    ([3, 3], 6, 6),             # six free, but no host can take four
    ([4, 2, 1], 3, 7),
    ([7, 0], 0, 7),
    ([], 0, 0),
])
def test_stranded_gpus(free_per_host, stranded4, stranded8):
    fleet = view(*(gpu_host(f"h{i}", used=8 - free) for i, free in enumerate(free_per_host)),
                 gpu_host("full", used=8))
    stranded = kpis.stranded_gpus(fleet)
    assert stranded["H100 SXM5 80GB", "az-1", 4] == stranded4
    assert stranded["H100 SXM5 80GB", "az-1", 8] == stranded8


def test_vgpus_and_unschedulable_hosts_are_never_stranded():
    fleet = view(gpu_host("v", total=8, used=7, rc="VGPU"),
                 gpu_host("off", used=6, enabled=False))
    assert kpis.stranded_gpus(fleet) == {("H100 SXM5 80GB", "az-1", 4): 0,
                                         ("H100 SXM5 80GB", "az-1", 8): 0}


def test_overcommitted_inventory_has_no_free_units():
    assert kpis.free_units(inventory(4, used=6)) == 0
