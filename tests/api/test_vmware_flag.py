"""Nova's ``vmware`` flag against the offered hosts' hypervisor types, on the demo fleet.

SAP's hook (nova/scheduler/external.py) sends ``vmware: true`` unless the flavor has a
non-VMware ``capabilities:hypervisor_type`` or the image an ``img_hv_type``: a KVM GPU
flavor without them comes flagged as VMware. Where every offered host the knowledge
knows contradicts the flag, the pipeline choice follows the hosts (the demo fleet's
``cmpNNNN`` hosts are QEMU, its ``nova-compute-bbNNNN`` clusters VMware vCenter Server),
logs the call, counts it in ``cortex_scheduler_vmware_flag_contradictions_total{flag}``
and the decision records ``pipeline_choice``.
"""

import logging

from tests.api.test_pipelines import decide, fixture, removed_by

COUNTER = "cortex_scheduler_vmware_flag_contradictions_total"
KVM = ["cmp0000", "cmp0001", "cmp0002", "cmp0003", "cmp0004", "cmp0005", "cmp0006",
       "cmp0007"]
VMWARE = ["nova-compute-bb0000", "nova-compute-bb0001", "nova-compute-bb0002",
          "nova-compute-bb0003"]


def unhinted(name, vmware, hosts=None, pipeline=None):
    """A bundled body without capabilities:hypervisor_type, flagged as SAP's hook flags it.

    Caller weights 0 (the order is the pipeline's own); ``hosts`` replace the offered ones.
    """
    body = fixture("nova", name, pipeline, neutral=True)
    specs = body["spec"]["nova_object.data"]["flavor"]["nova_object.data"]["extra_specs"]
    specs.pop("capabilities:hypervisor_type")
    body["vmware"] = vmware
    if hosts is not None:
        body["hosts"] = [{"host": h, "hypervisor_hostname": f"{h}.cloud.example"}
                         for h in hosts]
        body["weights"] = dict.fromkeys(hosts, 0.0)
    return body


def counted(app, flag):
    return app.extensions["cortex"].metrics.registry.get_sample_value(COUNTER, {"flag": flag})


def test_kvm_gpu_flavor_flagged_vmware_runs_the_gpu_pipeline_and_gets_its_pages(
        client, app, caplog):
    # 2 H100, pinned, 1 GiB pages, offered the demo fleet's QEMU hosts cmp0000-cmp0007
    body = unhinted("gpu-2xh100-pinned", True)
    assert {h["host"] for h in body["hosts"]} == set(KVM)
    with caplog.at_level(logging.WARNING, logger="cortex.scheduler.service"):
        hosts, decision = decide(client, app, "nova", body)
    assert decision["pipeline"] == "kvm-gpu-topology-aware"
    assert decision["pipeline_choice"] == {"followed": "hosts", "vmware_flag": True,
                                           "hosts": "kvm"}
    # cmp0000 has no free 1 GiB pages: the VMware pipeline answered it first
    assert "no 1048576 KiB pages" in removed_by(decision, "filter_numa_topology")["cmp0000"]
    assert hosts[0] == "cmp0001" and "cmp0000" not in hosts
    assert counted(app, "true") == 1.0 and counted(app, "false") == 0.0
    assert "vmware flag true contradicted" in caplog.text
    assert body["context"]["request_id"] in caplog.text


def test_vmware_flavor_flagged_false_on_vmware_clusters_runs_the_vmware_pipeline(client, app):
    body = unhinted("vmware-hana", False)
    assert all(h["host"].startswith("nova-compute-bb") for h in body["hosts"])
    hosts, decision = decide(client, app, "nova", body)
    assert decision["pipeline"] == "vmware-hana-bin-packing"
    assert decision["pipeline_choice"] == {"followed": "hosts", "vmware_flag": False,
                                           "hosts": "vmware"}
    ram = next(s for s in decision["steps"] if s["name"] == "weigher_ram")["raw"]
    assert hosts == sorted(ram, key=ram.get)     # stacked: least free memory first
    assert counted(app, "false") == 1.0 and counted(app, "true") == 0.0


def test_mixed_hosts_keep_the_flag(client, app):
    body = unhinted("gpu-2xh100-pinned", True, KVM[:4] + VMWARE)
    _, decision = decide(client, app, "nova", body)
    assert decision["pipeline"] == "vmware-general-purpose-load-balancing"
    assert "pipeline_choice" not in decision
    assert counted(app, "true") == 0.0


def test_the_counter_counts_contradictions_only(client, app):
    contradicting = unhinted("gpu-2xh100-pinned", True)
    for _ in range(2):
        decide(client, app, "nova", contradicting)
    assert counted(app, "true") == 2.0
    # a named pipeline, hosts that agree with the flag, mixed hosts, a simulation
    decide(client, app, "nova",
           unhinted("gpu-2xh100-pinned", True, pipeline="vmware-general-purpose-load-balancing"))
    decide(client, app, "nova", unhinted("gpu-2xh100-pinned", False))
    decide(client, app, "nova", unhinted("vmware-hana", True))
    decide(client, app, "nova", unhinted("gpu-2xh100-pinned", True, KVM[:4] + VMWARE))
    simulated = client.post("/v1/scheduler/nova/simulate", json=contradicting)
    assert simulated.status_code == 200
    assert simulated.get_json()["pipeline"] == "kvm-gpu-topology-aware"
    assert simulated.get_json()["pipeline_choice"]["vmware_flag"] is True
    assert counted(app, "true") == 2.0 and counted(app, "false") == 0.0


def test_an_explicit_pipeline_field_is_kept(client, app):
    body = unhinted("gpu-2xh100-pinned", True, pipeline="vmware-general-purpose-load-balancing")
    _, decision = decide(client, app, "nova", body)
    assert decision["pipeline"] == "vmware-general-purpose-load-balancing"
    assert "pipeline_choice" not in decision
    assert counted(app, "true") == 0.0
