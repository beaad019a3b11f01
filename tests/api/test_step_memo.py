"""Kept and shared answers change no decision (cortex.pipeline.memo, shared_answer).

Two apps on one database holding the demo fleet: one keeps the steps' answers per
knowledge version and shares the topology plugins' answers between hosts in one state
(the defaults), the other keeps none (``step_memo_size = 0``) and shares none
(``topology_options.ANSWER_LIMIT = 0`` while it decides). Every
bundled Nova body, and variants of them that share some of what the steps read and
differ in the rest (another project, another flavor size, other candidates, other
guest NUMA cells, another PCI NUMA policy), is decided by both, in an order that lets
a later request find answers an earlier one left; the decisions must be the same, step
by step and host by host.
"""

import copy

import pytest

from cortex.api.app import create_app
from cortex.pipeline import memo
from cortex.plugins import topology_options
from tests.api.conftest import make_conf, stop_app
from tests.api.test_recorded_decisions import decision
from tests.conftest import FIXTURES, bodies, demo_database, load_body

GPU_BODY = FIXTURES / "nova" / "gpu-2xh100-pinned.json"


@pytest.fixture(scope="module")
def clients():
    """``(kept, none)``: test clients of two apps on one demo-fleet database."""
    with demo_database("memo") as (url, engine):
        apps = [create_app(make_conf(**{"database.connection": url,
                                        "scheduler.step_memo_size": size}), engine=engine)
                for size in (memo.DEFAULT_LIMIT, 0)]
        yield [app.test_client() for app in apps]
        for app in apps:
            stop_app(app)


def _flavor(body: dict) -> dict:
    return body["spec"]["nova_object.data"]["flavor"]["nova_object.data"]


def variants(body: dict) -> list[dict]:
    """``body`` and bodies that keep some of what the steps read and change the rest."""
    found = [body]
    other_project = copy.deepcopy(body)
    other_project["spec"]["nova_object.data"]["project_id"] = "another-project"
    found.append(other_project)
    bigger = copy.deepcopy(body)
    _flavor(bigger)["memory_mb"] = _flavor(bigger).get("memory_mb", 1024) * 3
    _flavor(bigger)["vcpus"] = _flavor(bigger).get("vcpus", 1) + 6
    found.append(bigger)
    fewer = copy.deepcopy(body)
    fewer["hosts"] = fewer["hosts"][::2]
    fewer["weights"] = {h["host"]: fewer["weights"][h["host"]] for h in fewer["hosts"]}
    found.append(fewer)
    numa = body["spec"]["nova_object.data"].get("numa_topology")
    if numa:
        for change in ({"memory": 2048}, {"pagesize": 2048}, {"pagesize": None},
                       {"pcpuset": [0, 1]}, {"cpu_thread_policy": "require"},
                       {"cpu_thread_policy": "isolate"}):
            other = copy.deepcopy(body)
            cells = other["spec"]["nova_object.data"]["numa_topology"]["nova_object.data"]
            for cell in cells["cells"]:
                cell["nova_object.data"].update(change)
            found.append(other)
        isolated = copy.deepcopy(body)
        isolated["spec"]["nova_object.data"]["numa_topology"]["nova_object.data"][
            "emulator_threads_policy"] = "isolate"
        found.append(isolated)
    specs = _flavor(body).get("extra_specs") or {}
    if "pci_passthrough:alias" in specs:
        for policy in ("required", "preferred", "socket"):
            other = copy.deepcopy(body)
            _flavor(other)["extra_specs"]["hw:pci_numa_affinity_policy"] = policy
            found.append(other)
    return found


def test_kept_answers_change_no_decision(clients, monkeypatch):
    kept, none = clients
    requests = [variant for path in bodies("nova") if "1000-hosts" not in path.stem
                for variant in variants(load_body(path))]
    assert len(requests) > 40
    # twice, the second time in reverse: each request finds the answers of all others
    for body in [*requests, *reversed(requests)]:
        found = decision(kept, "nova", body)
        with monkeypatch.context() as patch:
            patch.setattr(topology_options, "ANSWER_LIMIT", 0)
            assert found == decision(none, "nova", body)


def _metric(client, name):
    """The value of the unlabelled sample ``name`` on ``/metrics``."""
    from prometheus_client.parser import text_string_to_metric_families

    text = client.get("/metrics").get_data(as_text=True)
    return {s.name: s.value for f in text_string_to_metric_families(text)
            for s in f.samples}[name]


def test_metrics_show_the_answers_kept_and_dropped(clients):
    """Operators size ``step_memo_size`` from these: kept, the limit, and drops past it."""
    from tests.api.test_contract import post

    kept = clients[0]
    body = load_body(GPU_BODY)
    assert post(kept, "nova", body).status_code == 200
    assert _metric(kept, "cortex_step_answers_kept") > 0
    assert _metric(kept, "cortex_step_answers_limit") == memo.DEFAULT_LIMIT
    assert _metric(kept, "cortex_step_answers_dropped_total") == 0
    with demo_database("memo-small") as (url, engine):
        app = create_app(make_conf(**{"database.connection": url,
                                      "scheduler.step_memo_size": 5}), engine=engine)
        small = app.test_client()
        try:
            assert post(small, "nova", body).status_code == 200
            assert _metric(small, "cortex_step_answers_limit") == 5
            dropped = _metric(small, "cortex_step_answers_dropped_total")
            assert dropped > 0
            # one table stays however big: the store never drops the table just made
            # (beside it, answers kept on a promised host's overlay state, when the feed
            # delivered the call's own promise in time)
            hosts = len(app.extensions["cortex"].knowledge.current.hosts)
            assert hosts <= _metric(small, "cortex_step_answers_kept") < 2 * hosts
            assert post(small, "nova", body).status_code == 200
            assert _metric(small, "cortex_step_answers_dropped_total") > dropped
        finally:
            stop_app(app)
