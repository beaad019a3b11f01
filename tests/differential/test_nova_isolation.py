"""Differential: the aggregate, isolation and server-group filters against upstream Nova
34.0.0's AggregateMultiTenancyIsolation, AggregateImagePropertiesIsolation,
IsolatedHostsFilter, ServerGroupAffinityFilter, ServerGroupAntiAffinityFilter and
AggregateInstanceExtraSpecsFilter.

``tests/differential/nova_isolation_side.py`` runs in the Nova virtualenv: from a fixed
seed it draws hosts (with instances), aggregates (tenant isolation keys, an empty one,
image-property keys, namespaced keys, unrelated keys), Nova's isolated hosts and images,
and requests (project, image id and properties, aggregate extra specs, an affinity or
anti-affinity group whose members run on the fleet, ``max_server_per_host``, some
rebuilds), builds each with Nova's own objects and judges every pair with the six
filters on a ``HostState``. Here
the same fleet and aggregates are imported and each body is POSTed to
``/scheduler/nova/external`` through a pipeline of the six Cortex filters, with Nova's
isolation options. Every pair must agree, but for pairs where a Nova filter raises (a
numeric operator on aggregate metadata that is no number; Nova fails the whole request,
Cortex refuses the host), counted apart. No body may be refused.

Size: ``CORTEX_ISOLATION_REQUESTS`` (default 100 requests x 40 candidates),
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
REQUESTS = int(os.environ.get("CORTEX_ISOLATION_REQUESTS", "100"))
HOSTS, CANDIDATES = 80, 40


def nova_lines(seed: int, requests: int) -> list[dict]:
    """The Nova side's JSON lines; fails the test if it fails."""
    return side_lines("nova_isolation_side.py", seed=seed, requests=requests, hosts=HOSTS,
                      candidates=CANDIDATES)


@pytest.fixture
def isolation_app(empty_database_url, tmp_path):
    """``(app, lines)``: an app over a fresh database holding the drawn fleet."""
    lines = nova_lines(SEED, REQUESTS)
    config = next(x for x in lines if x["kind"] == "config")
    hosts = [x["fleet"] for x in lines if x["kind"] == "host"]
    aggregates = next(x for x in lines if x["kind"] == "aggregates")["aggregates"]
    steps = ["filter_aggregate_multitenancy_isolation",
             "filter_aggregate_image_properties_isolation",
             {"name": "filter_isolated_hosts", "options": {
                 "isolated_hosts": config["isolated_hosts"],
                 "isolated_images": config["isolated_images"],
                 "restrict_isolated_hosts_to_isolated_images": config["restrict"]}},
             "filter_server_group_affinity", "filter_server_group_anti_affinity",
             "filter_aggregate_instance_extra_specs"]
    with fleet_app(empty_database_url, hosts, steps, tmp_path, aggregates) as app:
        yield app, lines


def test_isolation_and_group_filters_decide_as_nova(isolation_app):
    """Zero false accepts, zero false rejects, zero refused bodies over >= 3,000 pairs."""
    app, lines = isolation_app
    client = app.test_client()
    figures = {"seed": SEED, "requests": 0, "pairs": 0, "agree": 0, "nova_passes": 0,
               "nova_raises": 0,
               "nova_refusals_by": {}, "false_accepts": [], "false_rejects": [],
               "refused_bodies": []}
    for line in (x for x in lines if x["kind"] == "request"):
        figures["requests"] += 1
        answer = client.post("/scheduler/nova/external", json=line["body"])
        if answer.status_code != 200:
            figures["refused_bodies"].append({"id": line["id"], "detail": answer.get_json()})
            continue
        kept = set(answer.get_json()["hosts"])
        for host, nova in line["nova"].items():
            figures["pairs"] += 1
            if nova == "raises":
                figures["nova_raises"] += 1
                continue
            figures["nova_passes"] += nova
            for name, passed in line["why"][host].items():
                if passed is False:
                    figures["nova_refusals_by"][name] = figures["nova_refusals_by"].get(
                        name, 0) + 1
            if (host in kept) == nova:
                figures["agree"] += 1
            else:
                case = {"id": line["id"], "host": host, "project": line["project"],
                        "image": line["image"], "image_id": line["image_id"],
                        "group": line["group"], "intent": line["intent"],
                        "nova": line["why"][host]}
                figures["false_accepts" if host in kept else "false_rejects"].append(case)
    if os.environ.get("CORTEX_DIFFERENTIAL_REPORT"):
        Path(os.environ["CORTEX_DIFFERENTIAL_REPORT"]).write_text(json.dumps(figures, indent=1))
    assert not figures["refused_bodies"], figures["refused_bodies"][:3]
    assert not figures["false_accepts"] and not figures["false_rejects"], (
        f"{len(figures['false_accepts'])} false accepts, {len(figures['false_rejects'])} "
        f"false rejects of {figures['pairs']}; first: "
        f"{json.dumps(figures['false_accepts'][:3] + figures['false_rejects'][:3])[:6000]}")
    judged = figures["pairs"] - figures["nova_raises"]
    assert judged >= min(3000, REQUESTS * CANDIDATES * 3 // 4), figures["pairs"]
    assert 0 < figures["nova_passes"] < judged, "both verdicts must occur"
    assert len(figures["nova_refusals_by"]) == 6, "every filter must refuse some host"
