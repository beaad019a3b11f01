"""Differential: nova-baseline weighs hosts with guests on them as Nova 34.0.0 does.

Each drawn host runs guests: shared-CPU and pinned guests, guests backed by 1 GiB huge
pages, guests holding GPUs (PCI passthrough), guests in I/O tasks. Cortex's side is the
fleet Placement and the agent would show (VCPU and PCPU inventories with their usage and
reserved CPUs, MEMORY_MB and DISK_GB with reserved amounts, the NUMA cells' pinned CPUs and
huge pages, the GPUs taken, the instances, the failed builds). Nova's side is the
``HostState`` its resource tracker would report for the same guests, counted as Nova counts
them (``nova/compute/resource_tracker.py``, ``nova/virt/libvirt/driver.py``):
``vcpus_total`` the shared CPUs (0 on a host with dedicated CPUs only), ``vcpus_used`` the
reserved host CPUs plus every guest's vCPUs, pinned ones included; ``free_ram_mb`` the
memory less the reserved memory and every guest's memory, huge-page backed or not;
``free_disk_mb`` the disk less the reserved disk and every guest's disks (no
``disk_available_least``); the free PCI devices; the guests in I/O tasks; the failed
builds. ``tests/differential/nova_weigh.py`` weighs them with Nova's weigher handler and
default weighers; each final weight must be Nova's and the order Nova's.

Reserved disk is drawn in whole GiB: Placement's DISK_GB ``reserved`` is the reserved MiB
rounded up to GiB, so a fraction of a GiB is not knowable from Placement.
"""

from __future__ import annotations

import random

import pytest

from tests.conftest import FIXTURES, load_body
from tests.differential.fleet_app import fleet_app
from tests.differential.test_nova_weighers import (
    GPUS,
    REPORT,
    baseline_pipelines,
    nova_weights,
)

#: Host kinds: which CPU sets the compute service is given (``[compute] cpu_shared_set`` /
#: ``cpu_dedicated_set``), as Placement then shows them.
KINDS = ("shared", "split", "dedicated")
GIB_PAGE_KB = 1048576


def guests(rng: random.Random, name: str, kind: str) -> list[dict]:
    """Guests of one host: vCPUs, memory (MiB), disk (GiB), pinned, huge pages, I/O task."""
    found, pinned_room = [], 32  # pinned guests fit NUMA cell 0's dedicated CPUs 0-31
    for index in range(rng.choice((0, 1, 3, 5))):
        vcpus = rng.choice((2, 4, 8))
        pinned = kind == "dedicated" or (kind == "split" and rng.random() < 0.6)
        if pinned and vcpus > pinned_room:
            continue
        pinned_room -= vcpus if pinned else 0
        found.append({"uuid": f"{name}-g{index}", "vcpus": vcpus, "pinned": pinned,
                      "ram": rng.choice((4096, 16384, 65536)), "huge": rng.random() < 0.4,
                      "disk": rng.choice((20, 80, 200)),
                      "task_state": rng.choice((None, None, None, "rebuilding", "image_snapshot"))})
    return found


def draw(rng: random.Random, index: int) -> tuple[dict, dict]:
    """``(fleet host, Nova's HostState facts)`` of one host with guests on it."""
    name = f"g{index:03d}"
    kind = rng.choice(KINDS)
    on_host = guests(rng, name, kind)
    shared_cpus, dedicated_cpus = rng.choice((48, 64)), 32
    ratio = rng.choice((1.0, 4.0))
    reserved_cpus = rng.choice((0, 4)) if kind == "shared" else 0  # Nova refuses it beside sets
    memory, reserved_mb = rng.choice((524288, 1048576)), rng.choice((0, 8192))
    disk, reserved_disk_gb = rng.choice((2000, 4000)), rng.choice((0, 50))
    version, failures = rng.choice((8002000, 9000000)), rng.choice((0, 0, 0, 2))
    shared_used = sum(g["vcpus"] for g in on_host if not g["pinned"])
    pinned_used = sum(g["vcpus"] for g in on_host if g["pinned"])
    inventories = {
        "MEMORY_MB": {"total": memory, "reserved": reserved_mb, "allocation_ratio": 1.0,
                      "used": sum(g["ram"] for g in on_host)},
        "DISK_GB": {"total": disk, "reserved": reserved_disk_gb,
                    "used": sum(g["disk"] for g in on_host)}}
    if kind != "dedicated":
        inventories["VCPU"] = {"total": shared_cpus, "reserved": reserved_cpus,
                               "allocation_ratio": ratio, "used": shared_used}
    if kind != "shared":
        inventories["PCPU"] = {"total": dedicated_cpus, "used": pinned_used}
    huge_gib = sum(g["ram"] // 1024 for g in on_host if g["huge"])
    cell = {"hugepages": {str(GIB_PAGE_KB): {"total": 256, "used": huge_gib}}}
    if pinned_used:
        cell["pinned_cpus"] = f"0-{pinned_used - 1}"
    holders = [g["uuid"] for g in on_host]
    taken = rng.sample(GPUS, min(len(holders), rng.choice((0, 1, 2, 4))))
    host = {"host": name, "uuid": f"00000000-0000-0000-0003-{index:012d}",
            "hypervisor_type": "QEMU", "hypervisor_version": version,
            "failed_builds": failures, "inventories": inventories,
            "instances": [{"uuid": g["uuid"], "vm_state": "active",
                           "task_state": g["task_state"],
                           "flavor": {"original_name": f"f{g['vcpus']}", "vcpus": g["vcpus"],
                                      "ram": g["ram"], "disk": g["disk"], "extra_specs": (
                                          {"hw:cpu_policy": "dedicated"} if g["pinned"] else {})
                                      | ({"hw:mem_page_size": "1GB"} if g["huge"] else {})}}
                          for g in on_host],
            "topology": {"report": REPORT,
                         "gpus_in_use": dict(zip(taken, holders[:len(taken)], strict=True)),
                         "cells": {"0": cell}}}
    facts = {"host": name,
             "vcpus_total": shared_cpus if kind != "dedicated" else 0,
             "vcpus_used": reserved_cpus + sum(g["vcpus"] for g in on_host),
             "cpu_allocation_ratio": ratio,
             "free_ram_mb": memory - reserved_mb - sum(g["ram"] for g in on_host),
             "free_disk_mb": (disk * 1024 - reserved_disk_gb * 1024
                              - sum(g["disk"] * 1024 for g in on_host)),
             "hypervisor_version": version,
             "num_io_ops": sum(1 for g in on_host if g["task_state"] is not None),
             "failed_builds": failures, "free_pci": len(GPUS) - len(taken)}
    return host, facts


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_nova_baseline_weighs_guests_as_nova(seed, empty_database_url, tmp_path):
    rng = random.Random(seed)
    drawn = [draw(rng, i) for i in range(40)]
    hosts, facts = [h for h, _ in drawn], [f for _, f in drawn]
    # the draw holds what the weighers must count: pinned guests, huge pages, GPUs taken
    assert sum(h["inventories"].get("PCPU", {}).get("used", 0) for h in hosts) > 0
    assert any(f["vcpus_total"] == 0 and f["vcpus_used"] for f in facts)
    assert any(h["topology"]["cells"]["0"]["hugepages"][str(GIB_PAGE_KB)]["used"]
               for h in hosts)
    assert any(h["topology"]["gpus_in_use"] for h in hosts)
    nova = nova_weights(facts)
    body = load_body(FIXTURES / "nova" / "cpu-general-purpose.json")
    body["hosts"] = [{"host": h["host"], "hypervisor_hostname": h["host"]} for h in hosts]
    body["weights"] = {h["host"]: 0.0 for h in hosts}
    with fleet_app(empty_database_url, hosts, (), tmp_path, **{
            "scheduler.pipelines_file": str(baseline_pipelines(tmp_path / "baseline.yaml"))
    }) as app:
        answer = app.test_client().post("/v1/scheduler/nova/simulate", json=body)
    assert answer.status_code == 200, answer.get_data(as_text=True)
    found = answer.get_json()
    assert found["final_weights"] == pytest.approx(nova["weights"], abs=1e-6)
    weights = nova["weights"]
    # Nova's order; hosts whose weights are equal up to float noise may trade places
    for ours, theirs in zip(found["hosts"], nova["order"], strict=True):
        assert ours == theirs or abs(weights[ours] - weights[theirs]) < 1e-9, (ours, theirs)
    assert len({round(w, 6) for w in weights.values()}) > 10
