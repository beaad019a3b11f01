"""Failover room (issue 21): one H100 host's worth per zone kept for evacuations only.

On the demo fleet through ``/v1/scheduler/nova/simulate`` with the shipped GPU
pipeline's ``filter_failover_room`` turned on by an option override (``hosts: 1``):
the emptiest enabled, up H100 host of az-1 is refused to a create and offered to an
evacuation of the same VM.
"""

import copy

import pytest

from cortex.api.app import create_app
from cortex.plugins.base import OptionsError, build_options
from cortex.plugins.filters.failover_room import FailoverRoomFilter, FailoverRoomOptions
from tests.api.conftest import make_conf, stop_app
from tests.conftest import FIXTURES, demo_database, load_body

HOSTS = ("cmp0000", "cmp0001", "cmp0005", "cmp0008", "cmp0009", "cmp0010", "cmp0011")
ON = "option.filter_failover_room.hosts=1"


@pytest.fixture(scope="module")
def client():
    with demo_database("failover") as (url, engine):
        app = create_app(make_conf(**{"database.connection": url}), engine=engine)
        yield app.test_client()
        stop_app(app)


def body(evacuate=False):
    found = copy.deepcopy(load_body(FIXTURES / "nova" / "gpu-8xh100-full-node.json"))
    found["hosts"] = [{"host": h, "hypervisor_hostname": f"{h}.cloud.example"} for h in HOSTS]
    found["weights"] = dict.fromkeys(HOSTS, 0.0)
    if evacuate:
        found["spec"]["nova_object.data"]["scheduler_hints"] = {"_nova_check_type": ["evacuate"]}
        for flag in ("live", "rebuild", "resize"):
            found[flag] = False
    return found


def simulate(client, query, evacuate=False):
    answer = client.post(f"/v1/scheduler/nova/simulate?{query}", json=body(evacuate))
    assert answer.status_code == 200, answer.get_data(as_text=True)
    document = answer.get_json()
    step = next(s for s in document["steps"] if s["name"] == "filter_failover_room")
    return document["hosts"], step


def test_the_emptiest_h100_host_is_kept_for_evacuations(client):
    shipped, step = simulate(client, "")
    assert step["status"] == "skipped"  # hosts: 0 as shipped
    kept_out, step = simulate(client, ON)
    assert step["status"] == "ran" and len(step["removed"]) == 1
    (kept, reason), = step["removed"].items()
    assert "kept free for evacuations" in reason and "az-1" in reason
    assert kept in shipped and kept not in kept_out
    assert set(kept_out) == set(shipped) - {kept}
    evacuated, step = simulate(client, ON, evacuate=True)
    assert step["status"] == "skipped" and kept in evacuated


def test_the_room_is_the_emptiest_host_of_each_zone_and_model(client):
    view = client.application.extensions["cortex"].knowledge.view()
    bound = FailoverRoomFilter(FailoverRoomOptions(hosts=1)).bind(None, view)
    h100_az1 = [h for h, g in bound.kept.items() if g == ("az-1", "2330")]
    assert len(h100_az1) == 1
    free = {h: sum(not g.in_use for g in view.hosts[h].topology.gpus)
            for h in HOSTS if view.hosts[h].enabled and view.hosts[h].up}
    assert free[h100_az1[0]] == max(free.values())
    # one kept host per (zone, model) group, never a disabled or down one
    assert len(set(bound.kept.values())) == len(bound.kept)
    assert all(view.hosts[h].enabled and view.hosts[h].up for h in bound.kept)


@pytest.mark.parametrize("options", [{"hosts": -1}, {"group_by": "rack"}])
def test_options_outside_their_range_are_refused(options):
    with pytest.raises(OptionsError):
        build_options(FailoverRoomFilter, options)
