"""Differential: filter_requested_destination and filter_host_instructions against upstream
Nova 34.0.0's ``HostManager.get_filtered_hosts``.

``tests/differential/nova_destination_side.py`` runs in the Nova virtualenv: from a fixed
seed it draws hosts (one node each, named like the host or not) and requests with a
requested destination (host, host and its node, host and another node), ignored, forced
hosts and forced nodes spelled in either case, and asks Nova's own HostManager which
candidates it keeps with no filter enabled. Here the same hosts are a fleet and each body
is POSTed to ``/scheduler/nova/external`` through the two Cortex filters. Every pair must
agree; no body may be refused.

Size: ``CORTEX_DESTINATION_REQUESTS`` (default 150 requests x 20 candidates),
``CORTEX_DIFFERENTIAL_SEED`` (default 1), 60 hosts. Figures go to
``$CORTEX_DIFFERENTIAL_REPORT`` when set (JSON).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.differential.fleet_app import fleet_app
from tests.differential.nova_venv import side_lines

HERE = Path(__file__).parent
SEED = int(os.environ.get("CORTEX_DIFFERENTIAL_SEED", "1"))
REQUESTS = int(os.environ.get("CORTEX_DESTINATION_REQUESTS", "150"))
HOSTS, CANDIDATES = 60, 20
STEPS = ("filter_requested_destination", "filter_host_instructions")


def nova_lines(seed: int, requests: int) -> list[dict]:
    """The Nova side's JSON lines; fails the test if it fails."""
    return side_lines("nova_destination_side.py", seed=seed, requests=requests, hosts=HOSTS,
                      candidates=CANDIDATES)


def test_destination_and_host_instructions_decide_as_nova(empty_database_url, tmp_path):
    """Zero false accepts, zero false rejects, zero refused bodies over >= 2,500 pairs."""
    lines = nova_lines(SEED, REQUESTS)
    hosts = [x["fleet"] for x in lines if x["kind"] == "host"]
    figures = {"seed": SEED, "pairs": 0, "agree": 0, "nova_passes": 0, "false_accepts": [],
               "false_rejects": [], "refused_bodies": []}
    with fleet_app(empty_database_url, hosts, STEPS, tmp_path) as app:
        client = app.test_client()
        for line in (x for x in lines if x["kind"] == "request"):
            answer = client.post("/scheduler/nova/external", json=line["body"])
            if answer.status_code != 200:
                figures["refused_bodies"].append({"id": line["id"], "detail": answer.get_json()})
                continue
            kept = set(answer.get_json()["hosts"])
            for host, nova in line["nova"].items():
                figures["pairs"] += 1
                figures["nova_passes"] += nova
                if (host in kept) == nova:
                    figures["agree"] += 1
                    continue
                case = {k: line[k] for k in ("id", "destination", "ignore_hosts",
                                             "force_hosts", "force_nodes")} | {"host": host}
                figures["false_accepts" if host in kept else "false_rejects"].append(case)
    if os.environ.get("CORTEX_DIFFERENTIAL_REPORT"):
        Path(os.environ["CORTEX_DIFFERENTIAL_REPORT"]).write_text(json.dumps(figures, indent=1))
    assert not figures["refused_bodies"], figures["refused_bodies"][:3]
    assert not figures["false_accepts"] and not figures["false_rejects"], (
        f"{len(figures['false_accepts'])} false accepts, {len(figures['false_rejects'])} "
        f"false rejects of {figures['pairs']}; first: "
        f"{json.dumps(figures['false_accepts'][:3] + figures['false_rejects'][:3])[:4000]}")
    assert figures["pairs"] >= min(2500, REQUESTS * CANDIDATES * 5 // 6), figures["pairs"]
    assert 0 < figures["nova_passes"] < figures["pairs"], "both verdicts must occur"
