"""Failover room: one H100 host's worth per zone kept for evacuations only.

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


def test_room_sized_by_instances_keeps_as_few_hosts_as_any_one_host_needs():
    from cortex.request.nova import NovaRequest
    from cortex.rules.failover import gpu_instances, kept_hosts
    from cortex.simulator.cloud import SimCloud
    from cortex.simulator.fleet import read_fleet
    from cortex.simulator.replay import request_body
    from cortex.simulator.session import resolve_fleet
    from cortex.simulator.trace import TraceRequest

    fleet = read_fleet(resolve_fleet("hgx"))  # 16 HGX boards in az-1, 16 in az-2
    cloud = SimCloud(fleet)
    names = sorted(h for h in cloud.hosts if h.startswith("hgx-b"))

    def claim(host, name, gpus):
        request = NovaRequest.from_body(request_body(
            TraceRequest(name, 0.0, None, gpus, 0, 8 * gpus, 8192 * gpus, 2 if gpus > 4 else 1),
            [], {}, ""))
        assert cloud.hosts[host].claim(name, request) is not None

    # in az-2, every host but the last two holds one 8-GPU VM; one holds two 4-GPU VMs
    for host in names[:-2]:
        claim(host, f"vm-{host}", 8)
    claim(names[-2], "vm-a", 4)
    claim(names[-2], "vm-b", 4)
    view = cloud.view()
    assert gpu_instances(view.hosts[names[-2]]) == [4, 4]
    assert gpu_instances(view.hosts[names[0]]) == [8]

    def kept_in_az2(view, hosts, sized_by):
        return sorted(h for h in kept_hosts(view, hosts, "gpu_model", sized_by)
                      if h.startswith("hgx-b"))

    # an 8-GPU VM needs a whole free board: the one empty board serves any one host
    assert kept_in_az2(view, 3, "instances") == [names[-1]]
    # az-1 runs nothing: nothing to evacuate, nothing kept there
    assert len(kept_hosts(view, 3, "gpu_model", "instances")) == 1
    # no board free: no number of hosts is enough, the cap is kept
    claim(names[-1], "vm-c", 8)
    assert len(kept_in_az2(cloud.view(), 3, "instances")) == 3
    # sized by hosts: always the count asked for
    assert len(kept_in_az2(view, 2, "hosts")) == 2


def test_an_unknown_sizing_is_refused():
    with pytest.raises(OptionsError, match="sized_by"):
        build_options(FailoverRoomFilter, {"hosts": 1, "sized_by": "vibes"})
