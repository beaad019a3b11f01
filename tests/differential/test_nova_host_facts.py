"""Differential: filter_compute_capabilities and filter_image_properties against upstream
Nova 34.0.0's ComputeCapabilitiesFilter and ImagePropertiesFilter.

``tests/differential/nova_filters_side.py`` runs in the Nova virtualenv
(:func:`tests.differential.nova_venv.nova_venv`): it draws compute nodes (CPU vendor,
model, topology, features in random order, maxphysaddr, host IP, hypervisor type and
version, supported instances, usage) and requests (``capabilities:*`` extra specs with
every operator, unscoped and foreign-scope keys, ``hw:maxphysaddr_bits``, image
architecture, hv type, VM mode and version predicate, some rebuilds) from a fixed seed,
builds each request with Nova's own objects and judges every pair with both filters on a
``HostState`` built from a ``ComputeNode``. Here the same nodes are a fleet and each body
is POSTed to ``/scheduler/nova/external`` of ``create_app`` with a pipeline of the two
Cortex filters.

Every pair must agree, but for the listed exception: where a Nova filter raises instead
of answering (a numeric operator on text, ``ValueError``; ImagePropertiesFilter's
``hw_maxphysaddr_bits`` check calling ``.get`` on the ``cpu_info`` string,
``AttributeError``) Nova fails the whole request; Cortex answers, and those pairs are
counted apart. No body may be refused.

Size: ``CORTEX_HOST_FACTS_REQUESTS`` (default 100 requests x 40 candidates),
``CORTEX_DIFFERENTIAL_SEED`` (default 1), 80 hosts. Figures go to
``$CORTEX_DIFFERENTIAL_REPORT`` when set (JSON).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.differential.fleet_app import fleet_app
from tests.differential.nova_venv import side_lines

HERE = Path(__file__).parent
SEED = int(os.environ.get("CORTEX_DIFFERENTIAL_SEED", "1"))
REQUESTS = int(os.environ.get("CORTEX_HOST_FACTS_REQUESTS", "100"))
HOSTS, CANDIDATES = 80, 40
STEPS = ("filter_compute_capabilities", "filter_image_properties")


def nova_lines(seed: int, requests: int) -> list[dict]:
    """The Nova side's JSON lines (hosts, then requests with verdicts); fails if it fails."""
    return side_lines("nova_filters_side.py", seed=seed, requests=requests, hosts=HOSTS,
                      candidates=CANDIDATES)


@pytest.fixture
def host_facts_app(empty_database_url, tmp_path):
    """``(app, lines)``: an app over a fresh database holding the drawn nodes."""
    lines = nova_lines(SEED, REQUESTS)
    hosts = [x["fleet"] for x in lines if x["kind"] == "host"]
    with fleet_app(empty_database_url, hosts, STEPS, tmp_path) as app:
        yield app, lines


def compare(client, lines: list[dict]) -> dict:
    """Post every body; the figures and the disagreeing pairs."""
    figures = {"seed": SEED, "requests": 0, "pairs": 0, "agree": 0, "nova_passes": 0,
               "nova_raises": 0, "nova_raises_by": {}, "false_accepts": [],
               "false_rejects": [], "refused_bodies": []}
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
            if nova == "raises":
                figures["nova_raises"] += 1
                for why in line["why"][host]:
                    if isinstance(why, str):
                        figures["nova_raises_by"][why] = figures["nova_raises_by"].get(why, 0) + 1
                continue
            figures["nova_passes"] += nova
            if (host in kept) == nova:
                figures["agree"] += 1
            else:
                case = {"id": line["id"], "host": host, "specs": line["specs"],
                        "image": line["image"], "intent": line["intent"],
                        "nova": line["why"][host]}
                figures["false_accepts" if host in kept else "false_rejects"].append(case)
    return figures


def test_capabilities_and_image_properties_decide_as_nova(host_facts_app):
    """Zero false accepts, zero false rejects, zero refused bodies over >= 3,000 pairs."""
    app, lines = host_facts_app
    figures = compare(app.test_client(), lines)
    if os.environ.get("CORTEX_DIFFERENTIAL_REPORT"):
        Path(os.environ["CORTEX_DIFFERENTIAL_REPORT"]).write_text(json.dumps(figures, indent=1))
    hosts = {x["fleet"]["host"]: x["fleet"] for x in lines if x["kind"] == "host"}
    wrong = figures["false_accepts"][:3] + figures["false_rejects"][:3]
    detail = [(w, hosts[w["host"]]) for w in wrong]
    assert not figures["refused_bodies"], figures["refused_bodies"][:3]
    assert not figures["false_accepts"] and not figures["false_rejects"], (
        f"{len(figures['false_accepts'])} false accepts, {len(figures['false_rejects'])} "
        f"false rejects of {figures['pairs']}; first: {json.dumps(detail)[:6000]}")
    judged = figures["pairs"] - figures["nova_raises"]
    assert judged >= min(3000, REQUESTS * CANDIDATES * 3 // 4), figures
    assert 0 < figures["nova_passes"] < judged, "both verdicts must occur"
    assert set(figures["nova_raises_by"]) <= {"ValueError", "AttributeError"}, figures
