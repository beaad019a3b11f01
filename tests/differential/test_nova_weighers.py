"""Differential: nova-baseline weighs as upstream Nova 34.0.0's weigher handler does.

``tests/differential/nova_weigh.py`` runs in the Nova virtualenv and weighs drawn hosts
with Nova's own ``HostWeightHandler`` and every default weigher under the default
multipliers. Here the same hosts are a fleet (Placement inventories with usage, the
hypervisor version, instances in I/O operations, failed builds, GPUs free or taken in an
agent report) and a body naming them is simulated through a pipeline of the shipped
``nova-baseline``'s weighers and weighing (``etc/cortex/pipelines.yaml``), without its
filters. Each host's final weight must be Nova's, and the answer Nova's order: equal
weights keep the caller's (Nova's input) order on both sides.
"""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import FIXTURES, REPO, load_body
from tests.differential.fleet_app import fleet_app
from tests.differential.nova_venv import NovaUnavailable, nova_venv

HERE = Path(__file__).parent
REPORT = json.loads((REPO / "etc/cortex/topology/l40s-4gpu-pcie.json").read_text())
GPUS = [g["pci_address"] for g in REPORT["gpus"]]


def draw(rng: random.Random, index: int) -> tuple[dict, dict]:
    """``(fleet host, Nova's facts)`` of one host, its values from small sets (ties occur)."""
    name = f"w{index:03d}"
    memory, vcpus, disk = rng.choice((262144, 524288)), rng.choice((32, 64)), rng.choice(
        (1000, 3000))
    ratio = rng.choice((1.0, 4.0))
    used = {"MEMORY_MB": rng.choice((0, 65536, 262144, 600000)),
            "VCPU": rng.choice((0, 16, 64, 300)), "DISK_GB": rng.choice((0, 500, 2000))}
    reserved_ram, reserved_disk = rng.choice((0, 4096)), rng.choice((0, 100))
    version = rng.choice((8002000, 9000000, None))
    io_ops, failures = rng.choice((0, 0, 1, 3)), rng.choice((0, 0, 0, 2))
    gpus = rng.random() < 0.6
    taken = rng.sample(GPUS, rng.choice((0, 1, 4))) if gpus else []
    host = {"host": name, "uuid": f"00000000-0000-0000-0001-{index:012d}",
            "hypervisor_type": "QEMU", "hypervisor_version": version,
            "failed_builds": failures,
            "instances": [{"uuid": f"{name}-io-{i}", "vm_state": "active",
                           "task_state": "rebuilding"} for i in range(io_ops)],
            "inventories": {
                "VCPU": {"total": vcpus, "allocation_ratio": ratio, "used": used["VCPU"]},
                "MEMORY_MB": {"total": memory, "reserved": reserved_ram, "allocation_ratio": 1.5,
                              "used": used["MEMORY_MB"]},
                "DISK_GB": {"total": disk, "reserved": reserved_disk, "used": used["DISK_GB"]}}}
    if gpus:
        host["topology"] = {"report": REPORT, "gpus_in_use": taken}
    facts = {"host": name, "free_ram_mb": memory - reserved_ram - used["MEMORY_MB"],
             "vcpus_total": vcpus, "vcpus_used": used["VCPU"], "cpu_allocation_ratio": ratio,
             "free_disk_mb": (disk - reserved_disk - used["DISK_GB"]) * 1024,
             "hypervisor_version": version or 0, "num_io_ops": io_ops,
             "failed_builds": failures, "free_pci": len(GPUS) - len(taken) if gpus else 0}
    return host, facts


def nova_weights(facts: list[dict], group: dict | None = None) -> dict:
    """Nova's answer for the hosts (weights, order); fails when the Nova side fails."""
    try:
        python = nova_venv() / "bin" / "python"
    except NovaUnavailable as exc:
        pytest.fail(str(exc))
    done = subprocess.run([str(python), str(HERE / "nova_weigh.py")],
                          input=json.dumps({"hosts": facts, "group": group}),
                          capture_output=True, text=True,
                          check=False)
    if done.returncode:
        pytest.fail(f"nova_weigh.py failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout)


def baseline_pipelines(path: Path) -> Path:
    """A pipelines file whose Nova default has the shipped nova-baseline's weighing."""
    shipped = yaml.safe_load((REPO / "etc/cortex/pipelines.yaml").read_text())
    baseline = shipped["pipelines"]["nova-baseline"]
    path.write_text(yaml.safe_dump({"defaults": {"nova": "p"}, "pipelines": {"p": {
        "service": "nova", "weighing": baseline["weighing"],
        "weighers": baseline["weighers"]}}}))
    return path


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_nova_baseline_weighs_as_nova(seed, empty_database_url, tmp_path):
    rng = random.Random(seed)
    drawn = [draw(rng, i) for i in range(58)]
    for index, (host, fact) in enumerate(drawn[:2]):  # two twins: equal weights for sure
        twin = f"t{index:03d}"
        drawn.append((host | {"host": twin, "uuid": f"00000000-0000-0000-0002-{index:012d}"},
                      fact | {"host": twin}))
    hosts, facts = [h for h, _ in drawn], [f for _, f in drawn]
    nova = nova_weights(facts)
    assert "RAMWeigher" in nova["weighers"] and "PCIWeigher" in nova["weighers"]
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
    assert len({round(w, 6) for w in weights.values()}) > 10  # the weights differ...
    assert weights["t000"] == weights["w000"] and weights["t001"] == weights["w001"]
    assert found["hosts"].index("w000") < found["hosts"].index("t000")  # ...ties: input order


@pytest.mark.parametrize("policy, seed", [("soft-affinity", 4), ("soft-anti-affinity", 5)])
def test_soft_group_weighers_weigh_as_nova(policy, seed, empty_database_url, tmp_path):
    """A soft (anti-)affinity group whose members run on some hosts, 0 to 3 each."""
    rng = random.Random(seed)
    drawn = [draw(rng, i) for i in range(40)]
    members, on = [], {}
    for host, fact in drawn:
        here = [f"{host['host']}-member-{k}" for k in range(rng.choice((0, 0, 1, 2, 3)))]
        host["instances"] = host.get("instances", []) + [
            {"uuid": u, "vm_state": "active", "task_state": None} for u in here]
        fact["instances"] = here
        members += here
        if here:
            on[host["host"]] = here
    group = {"policy": policy, "members": members, "hosts": sorted(on)}
    hosts, facts = [h for h, _ in drawn], [f for _, f in drawn]
    nova = nova_weights(facts, group)
    body = load_body(FIXTURES / "nova" / "cpu-general-purpose.json")
    body["spec"]["nova_object.data"]["instance_group"] = {
        "nova_object.name": "InstanceGroup", "nova_object.namespace": "nova",
        "nova_object.version": "1.11",
        "nova_object.data": {"uuid": "5ca1ab1e-0000-4000-8000-000000000001", "rules": {},
                             "policy": policy, "members": members, "hosts": sorted(on)}}
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
    for ours, theirs in zip(found["hosts"], nova["order"], strict=True):
        assert ours == theirs or abs(weights[ours] - weights[theirs]) < 1e-9, (ours, theirs)
