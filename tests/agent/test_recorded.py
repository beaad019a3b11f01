"""cortex-agent replayed on what real GPU machines answered it (NVML and sysfs, recorded there)."""

import pytest

from cortex.api.schema import RequestValidator, load_openapi
from tests.recorded_nvml import RECORDED, load_recording, recorded_machines, replay_report

VALIDATOR = RequestValidator(load_openapi())


@pytest.mark.parametrize("machine", recorded_machines())
def test_the_replayed_machine_gives_the_recorded_report(tmp_path, machine):
    """The agent, fed what the machine answered, reports what it reported there."""
    report, nvml = replay_report(machine, tmp_path)
    recording = load_recording(machine)
    assert report == recording["report"]
    assert nvml.asked == [entry["call"] for entry in recording["calls"]]
    assert VALIDATOR.topology_errors(report) == []


@pytest.mark.parametrize("machine", recorded_machines())
def test_a_changed_answer_changes_the_report(tmp_path, machine):
    """The replay answers from the recording: an edited answer shows in the report."""
    recording = load_recording(machine)
    call = next(c for c in recording["calls"] if c["call"] == "nvmlDeviceGetName")
    call["result"] = "NVIDIA Edited"
    report, _ = replay_report(machine, tmp_path, recording)
    assert {g["name"] for g in report["gpus"] if g["index"] is not None} == {"NVIDIA Edited"}


def test_an_h200_passed_through_to_a_vm():
    """One H200 passed through to a KVM guest (Firecracker), recorded with driver 580.159.04.

    What the hardware said that no layout invented: NVML places the GPU on node 0 by its
    memory affinity while the guest's sysfs has no NUMA node for the PCI function (-1),
    so Nova's PCI tracker sees none; Hopper answers NotSupported for retired pages (it
    remaps rows instead); a single GPU has no NVLink at all (link 0 NotSupported).
    """
    report = load_recording("h200-vm")["report"]
    (gpu,) = report["gpus"]
    assert (gpu["name"], gpu["device_id"], gpu["memory_mb"]) == ("NVIDIA H200", "2335", 143771)
    assert (gpu["numa_node"], gpu["numa_source"], gpu["pci_numa_node"]) == (
        0, "nvml_memory_affinity", None)
    assert gpu["virtualization_mode"] == "passthrough"
    assert gpu["compute_capability"] == "9.0"
    assert gpu["unsupported"] == ["nvmlDeviceGetRetiredPagesPendingStatus: Not Supported"]
    assert gpu["health"] == {"healthy": True, "reasons": []}
    assert 0 < gpu["power_watts"] < 700
    assert report["gpu_links"] == [] and report["nvml_error"] is None
    (cell,) = report["numa_cells"]
    assert cell["cpus"] == "0-15"


def _lscpu(machine: str) -> dict[str, str]:
    """``lscpu``'s fields as the recorded machine printed them (its ``host.txt``)."""
    text = (RECORDED / machine / "host.txt").read_text()
    return {k.strip(): v.strip() for k, v in
            (line.split(":", 1) for line in text.splitlines() if ":" in line)}


def test_the_h100_host_cpu_is_what_lscpu_said_there(tmp_path):
    """The agent's ``cpu_info`` on the recorded H100 guest (read from its procfs and sysfs,
    both recorded) agrees with ``lscpu`` run on the same machine at the same time."""
    report, _ = replay_report("h100-vm", tmp_path)
    lscpu = _lscpu("h100-vm")
    info = report["cpu_info"]
    assert info["arch"] == lscpu["Architecture"]
    assert info["vendor"] == {"GenuineIntel": "Intel", "AuthenticAMD": "AMD"}[lscpu["Vendor ID"]]
    assert info["topology"] == {
        "cells": int(lscpu["NUMA node(s)"]), "sockets": int(lscpu["Socket(s)"]),
        "cores": int(lscpu["Core(s) per socket"]), "threads": int(lscpu["Thread(s) per core"])}
    assert f"{info['maxphysaddr']['bits']} bits physical" in lscpu["Address sizes"]
