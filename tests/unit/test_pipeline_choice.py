"""The pipeline choice against Nova's ``vmware`` flag: the offered hosts overrule a flag
they all contradict (cortex/pipeline/choice.py, the rules of etc/cortex/pipelines.yaml).

SAP's hook sends ``vmware: true`` for a KVM flavor without ``capabilities:hypervisor_type``
and an image without ``img_hv_type``; the shipped rules then chose a VMware pipeline for
KVM GPU flavors offered only KVM hosts.
"""

from dataclasses import replace

import pytest

from cortex import conf
from cortex.pipeline.choice import choose_pipeline, flag_contradiction
from cortex.pipeline.config import load_pipelines
from tests.fakes import host, nova, view

SHIPPED = load_pipelines(conf.shipped_file("pipelines.yaml"))
KVM_HOSTS = ["cmp0", "cmp1", "cmp2"]
VMWARE_HOSTS = ["bb0", "bb1"]
GPU_SPECS = {"hw:cpu_policy": "dedicated", "hw:mem_page_size": "1GB",
             "hw:pci_numa_affinity_policy": "required", "pci_passthrough:alias": "h100:2"}


def fleet(kvm=("QEMU", "QEMU", "QEMU"), vmware=("VMware vCenter Server",) * 2):
    """Three KVM hosts and two VMware clusters of the given hypervisor types."""
    return view(*(host(n, hypervisor_type=t) for n, t in zip(KVM_HOSTS, kvm, strict=True)),
                *(host(n, hypervisor_type=t) for n, t in zip(VMWARE_HOSTS, vmware,
                                                             strict=True)))


def gpu_request(hosts, flag, **top):
    """The KVM GPU flavor of gpu-2xh100-pinned without capabilities:hypervisor_type."""
    return nova("gpu-2xh100-pinned", hosts=hosts, flavor={"extra_specs": GPU_SPECS},
                vmware=flag, **top)


def hana_request(hosts, flag):
    """vmware-hana's flavor without capabilities:hypervisor_type (HANA trait required)."""
    return nova("vmware-hana", hosts=hosts, vmware=flag, flavor={
        "extra_specs": {"trait:CUSTOM_HANA_EXCLUSIVE_HOST": "required"}})


def test_kvm_gpu_flavor_flagged_vmware_on_kvm_hosts_gets_the_gpu_pipeline():
    choice = choose_pipeline(SHIPPED, gpu_request(KVM_HOSTS, True), view=fleet())
    assert choice.pipeline.name == "kvm-gpu-topology-aware"
    assert choice.record == {"followed": "hosts", "vmware_flag": True, "hosts": "kvm"}


@pytest.mark.parametrize("types", [("kvm", "KVM", "qemu"), ("ch", "QEMU", "Kvm")])
def test_every_kvm_spelling_counts_as_kvm(types):
    request = gpu_request(KVM_HOSTS, True)
    assert choose_pipeline(SHIPPED, request, view=fleet(kvm=types)).pipeline.name == \
        "kvm-gpu-topology-aware"
    assert flag_contradiction(request, fleet(kvm=types)) == {t.lower() for t in types}


def test_kvm_hana_flavor_flagged_vmware_on_kvm_hosts_gets_kvm_hana():
    choice = choose_pipeline(SHIPPED, hana_request(KVM_HOSTS, True), view=fleet())
    assert choice.pipeline.name == "kvm-hana-bin-packing"
    assert choice.overruled is True and choice.hosts == "kvm"


def test_plain_flavor_flagged_vmware_on_kvm_hosts_gets_the_kvm_default():
    request = nova("cpu-general-purpose", hosts=KVM_HOSTS, vmware=True,
                   flavor={"extra_specs": {}})
    assert choose_pipeline(SHIPPED, request, view=fleet()).pipeline.name == \
        "kvm-general-purpose-load-balancing"


@pytest.mark.parametrize("make, pipeline", [
    (hana_request, "vmware-hana-bin-packing"),
    (lambda hosts, flag: nova("cpu-general-purpose", hosts=hosts, vmware=flag,
                              flavor={"extra_specs": {}}),
     "vmware-general-purpose-load-balancing"),
])
def test_flag_false_on_vmware_hosts_gets_the_vmware_pipeline(make, pipeline):
    choice = choose_pipeline(SHIPPED, make(VMWARE_HOSTS, False), view=fleet())
    assert choice.pipeline.name == pipeline
    assert choice.record == {"followed": "hosts", "vmware_flag": False, "hosts": "vmware"}


@pytest.mark.parametrize("hosts, flag, types, pipeline", [
    # mixed KVM and VMware: the flag decides
    (KVM_HOSTS + VMWARE_HOSTS, True, None, "vmware-general-purpose-load-balancing"),
    (KVM_HOSTS + VMWARE_HOSTS, False, None, "kvm-gpu-topology-aware"),
    # a node of unknown type, or of another hypervisor: the flag decides
    (KVM_HOSTS, True, ("QEMU", None, "QEMU"), "vmware-general-purpose-load-balancing"),
    (KVM_HOSTS, True, ("QEMU", "ironic", "QEMU"), "vmware-general-purpose-load-balancing"),
    # no offered host known: the flag decides
    (["gone0", "gone1"], True, None, "vmware-general-purpose-load-balancing"),
    # the flag agrees with the hosts: nothing overruled
    (KVM_HOSTS, False, None, "kvm-gpu-topology-aware"),
    (VMWARE_HOSTS, True, None, "vmware-general-purpose-load-balancing"),
])
def test_mixed_unknown_or_agreeing_hosts_keep_the_flag(hosts, flag, types, pipeline):
    knowledge = fleet(kvm=types) if types else fleet()
    choice = choose_pipeline(SHIPPED, gpu_request(hosts, flag), view=knowledge)
    assert choice.pipeline.name == pipeline
    assert choice.overruled is None and choice.record is None


def test_hosts_the_view_does_not_know_are_left_out():
    choice = choose_pipeline(SHIPPED, gpu_request(["gone", *KVM_HOSTS], True), view=fleet())
    assert choice.pipeline.name == "kvm-gpu-topology-aware"
    assert choice.overruled is True


def test_every_node_of_a_host_counts():
    both = host("cmp0", nodes={"cmp0-a": {}, "cmp0-b": {}})
    other = replace(both.nodes["cmp0-b"], hypervisor_type="VMware vCenter Server")
    split = replace(both, nodes={"cmp0-a": both.nodes["cmp0-a"], "cmp0-b": other})
    request = gpu_request(["cmp0", "cmp1"], True)
    assert flag_contradiction(request, view(both, host("cmp1"))) == {"qemu"}
    assert flag_contradiction(request, view(split, host("cmp1"))) is None


def test_the_flavors_hypervisor_type_decides_over_the_hosts():
    # the flag is not read where the flavor names the hypervisor
    request = nova("gpu-2xh100-pinned", hosts=KVM_HOSTS, vmware=True, flavor={
        "extra_specs": GPU_SPECS | {"capabilities:hypervisor_type": "VMware vCenter Server"}})
    choice = choose_pipeline(SHIPPED, request, view=fleet())
    assert choice.pipeline.name == "vmware-general-purpose-load-balancing"
    assert choice.record is None


@pytest.mark.parametrize("field, name", [("request", "vmware-general-purpose-load-balancing"),
                                         ("simulation", "kvm-gpu-bin-packing")])
def test_a_named_pipeline_is_kept_as_it_is(field, name):
    top = {"pipeline": name} if field == "request" else {}
    request = gpu_request(KVM_HOSTS, True, **top)
    choice = choose_pipeline(SHIPPED, request, name if field == "simulation" else None,
                             view=fleet())
    assert choice.pipeline.name == name and choice.record is None


def test_overrides_keep_what_the_hosts_decided():
    choice = choose_pipeline(SHIPPED, gpu_request(KVM_HOSTS, True),
                             multipliers={"weigher_gpu_affinity": 3.0}, view=fleet())
    assert choice.pipeline.name == "kvm-gpu-topology-aware" and choice.overruled is True
    assert {s.name: s.multiplier for s in choice.pipeline.weighers}[
        "weigher_gpu_affinity"] == 3.0
