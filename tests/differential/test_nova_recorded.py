"""Real machines: Cortex decides as Nova 34 on the agent's reports recorded on real GPU hosts.

The generated hosts of the other differential tests are what the agent *could* report;
these are what it *did* report on real machines (``tests/fixtures/topology/recorded``,
captured with NVML on the hardware). Each becomes a host of ``nova_side.py --serve``
(Nova's NUMATopology and PCI pools built from the report, its GPU model under the alias
``rec-<vendor>-<product>``) and of a Cortex fleet, and every request of a grid over the
knobs that decide a GPU placement (GPUs asked, PCI NUMA affinity policy, guest NUMA
nodes, CPU policy, vCPUs, memory, page size) goes to both. Every verdict must agree.

The grid is sized to the machine: asks of its GPU count and one more, vCPUs and memory
that fit its smallest cell and that do not, so both verdicts occur.
"""

from __future__ import annotations

import itertools
import json

import pytest

from tests.differential.fleet_app import ALIASES, STEPS, fleet_app, fleet_host
from tests.differential.nova_worker import NovaWorker
from tests.recorded_nvml import RECORDED, load_recording, recorded_machines

POLICIES = (None, "required", "legacy", "preferred", "socket")


def recorded_aliases(report: dict) -> list[dict]:
    """Cortex's ``[gpu] pci_alias`` entries for the report's GPU models (as nova_side names)."""
    models = sorted({(g["vendor_id"], g["device_id"]) for g in report["gpus"]})
    return [{"name": f"rec-{v}-{p}", "vendor_id": v, "product_id": p} for v, p in models]


def grid(report: dict) -> list[dict]:
    """The requests asked of a recorded host: every combination of the deciding knobs."""
    gpus = len(report["gpus"])
    alias = recorded_aliases(report)[0]["name"]
    cell_cpus = min(len(c["siblings"]) for c in report["numa_cells"])
    cell_memory = min(c["memory_mb"] for c in report["numa_cells"])
    asks = []
    for count, policy, nodes, pinned, vcpus, memory, pages in itertools.product(
            (1, gpus + 1), POLICIES, (None, 1), (False, True), (2, cell_cpus + 1),
            (1024, cell_memory + 1024), (None, "large")):
        specs = {"pci_passthrough:alias": f"{alias}:{count}"}
        if policy:
            specs["hw:pci_numa_affinity_policy"] = policy
        if nodes:
            specs["hw:numa_nodes"] = str(nodes)
        if pinned:
            specs["hw:cpu_policy"] = "dedicated"
        if pages:
            specs["hw:mem_page_size"] = pages
        asks.append({"specs": specs, "image": {}, "hosts": [report["host"]],
                     "knobs": {"vcpus": vcpus, "memory_mb": memory, "intent": "create",
                               "id": len(asks), "pci_in_placement": False}})
    return asks


@pytest.mark.parametrize("machine", recorded_machines())
def test_cortex_decides_as_nova_on_a_recorded_machine(machine, empty_database_url, tmp_path):
    report = load_recording(machine)["report"]
    worker = NovaWorker(seed=1, hosts=0, reports=[RECORDED / machine / "report.json"])
    try:
        line = next(h for h in worker.fleet if h["host"] == report["host"])
        host = fleet_host(line["host"], line["report"])
        aliases = json.dumps(ALIASES + recorded_aliases(report))
        with fleet_app(empty_database_url, [host], STEPS, tmp_path,
                       **{"gpu.pci_alias": aliases}) as app:
            client = app.test_client()
            verdicts, wrong = [], []
            for ask in grid(report):
                nova = worker.judge(ask)
                assert nova["kind"] == "request", ask
                answer = client.post("/scheduler/nova/external", json=nova["body"])
                assert answer.status_code == 200, answer.get_json()
                cortex = report["host"] in answer.get_json()["hosts"]
                verdicts.append(cortex)
                if cortex != nova["nova"][report["host"]]:
                    wrong.append((ask["specs"], ask["knobs"], cortex))
    finally:
        worker.close()
    assert wrong == [], f"{len(wrong)} of {len(verdicts)} disagree; first: {wrong[:3]}"
    assert any(verdicts) and not all(verdicts), "both verdicts must occur"
