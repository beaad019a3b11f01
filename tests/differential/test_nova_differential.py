"""Differential: Cortex's NUMA and PCI filters against upstream Nova 34.0.0's real filters.

``tests/differential/nova_side.py`` runs in the Nova virtualenv
(:func:`tests.differential.nova_venv.nova_venv`): it draws hosts and requests from a fixed
seed, builds each request with Nova's own objects and judges every (host, request) pair
with Nova's ``NUMATopologyFilter`` and ``PciPassthroughFilter`` over a real ``HostState``.
Here the same hosts are imported as a fleet whose topology is what cortex-agent would
report, and every body is POSTed to ``/scheduler/nova/external`` of ``create_app`` with a
pipeline of the filters that stand in for Nova's two (:data:`STEPS`: the topology filters,
and the trait filter because the bodies carry Nova's ``OWNER_NOVA``/
``COMPUTE_STATUS_DISABLED`` pre-filter traits). Every pair must agree; the one allowed difference
is a pair where Nova's answer comes from the order in which it tries host cells (it
differs from the order-independent truth, see nova_side.truth_verdict) and Cortex gives
the truth. No body may be refused.

Size: ``CORTEX_DIFFERENTIAL_REQUESTS`` (default 140 requests x 40 candidates, over 5,000
pairs), ``CORTEX_DIFFERENTIAL_SEED`` (default 1), ``CORTEX_DIFFERENTIAL_HOSTS`` (300).
The figures go to ``$CORTEX_DIFFERENTIAL_REPORT`` when set (JSON).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.differential.fleet_app import ALIASES, STEPS, fleet_app, fleet_host
from tests.differential.nova_venv import NovaUnavailable, nova_venv

HERE = Path(__file__).parent
SEED = int(os.environ.get("CORTEX_DIFFERENTIAL_SEED", "1"))
REQUESTS = int(os.environ.get("CORTEX_DIFFERENTIAL_REQUESTS", "140"))
HOSTS = int(os.environ.get("CORTEX_DIFFERENTIAL_HOSTS", "300"))
CANDIDATES = 40


def nova_lines(seed: int, requests: int, hosts: int) -> list[dict]:
    """The Nova side's JSON lines (hosts, then requests with verdicts); fails if it fails."""
    try:
        python = nova_venv() / "bin" / "python"
    except NovaUnavailable as exc:
        pytest.fail(str(exc))
    done = subprocess.run([str(python), str(HERE / "nova_side.py"), "--seed", str(seed),
                           "--requests", str(requests), "--hosts", str(hosts),
                           "--candidates", str(CANDIDATES)],
                          capture_output=True, text=True, check=False)
    if done.returncode:
        pytest.fail(f"nova_side.py failed: {done.stderr[-3000:]}")
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.fixture
def differential_app(empty_database_url, tmp_path):
    """``(app, lines)``: an app over a fresh database holding the generated hosts."""
    lines = nova_lines(SEED, REQUESTS, HOSTS)
    hosts = [fleet_host(h["host"], h["report"], i, h["cpu_allocation_ratio"],
                        h["ram_allocation_ratio"], h["traits"])
             for i, h in enumerate(x for x in lines if x["kind"] == "host")]
    with fleet_app(empty_database_url, hosts, STEPS, tmp_path,
                   **{"gpu.pci_alias": json.dumps(ALIASES)}) as app:
        yield app, lines


def compare(client, lines: list[dict]) -> dict:
    """Post every body; the figures and the disagreeing pairs."""
    figures = {"seed": SEED, "requests": 0, "pairs": 0, "agree": 0, "order_dependent": 0,
               "false_accepts": [], "false_rejects": [], "refused_bodies": [],
               "order_dependent_cases": [],
               "nova_passes": 0}
    for line in (x for x in lines if x["kind"] == "request"):
        figures["requests"] += 1
        answer = client.post("/scheduler/nova/external", json=line["body"])
        if answer.status_code != 200:
            figures["refused_bodies"].append({"id": line["id"], "status": answer.status_code,
                                              "detail": answer.get_json()})
            continue
        kept = set(answer.get_json()["hosts"])
        for host, nova in line["nova"].items():
            figures["pairs"] += 1
            figures["nova_passes"] += nova
            cortex, truth = host in kept, line["truth"][host]
            if cortex == nova:
                figures["agree"] += 1
            elif cortex == truth != nova:  # Nova's answer came from its cell order
                figures["order_dependent"] += 1
                figures["order_dependent_cases"].append(
                    {"id": line["id"], "host": host, "nova": nova, "specs": line["specs"],
                     "image": line["image"]})
            else:
                case = {"id": line["id"], "host": host, "specs": line["specs"],
                        "image": line["image"], "knobs": line["knobs"]}
                figures["false_accepts" if cortex else "false_rejects"].append(case)
    return figures


def test_cortex_decides_as_nova_on_every_generated_pair(differential_app):
    """Zero false accepts, zero false rejects, zero refused bodies over >= 5,000 pairs."""
    app, lines = differential_app
    figures = compare(app.test_client(), lines)
    if os.environ.get("CORTEX_DIFFERENTIAL_REPORT"):
        Path(os.environ["CORTEX_DIFFERENTIAL_REPORT"]).write_text(json.dumps(figures, indent=1))
    hosts = {x["host"]: x for x in lines if x["kind"] == "host"}
    wrong = figures["false_accepts"][:3] + figures["false_rejects"][:3]
    detail = [(w, hosts[w["host"]]["report"]["numa_cells"]) for w in wrong]
    assert not figures["refused_bodies"], figures["refused_bodies"][:3]
    assert not figures["false_accepts"] and not figures["false_rejects"], (
        f"{len(figures['false_accepts'])} false accepts, {len(figures['false_rejects'])} "
        f"false rejects of {figures['pairs']}; first: {json.dumps(detail)[:6000]}")
    assert figures["pairs"] >= min(5000, REQUESTS * CANDIDATES - 200), figures["pairs"]
    assert 0 < figures["nova_passes"] < figures["pairs"], "both verdicts must occur"
