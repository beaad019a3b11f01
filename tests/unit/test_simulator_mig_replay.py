"""MIG-backed vGPU hosts and MIG requests in the pipelines' replays (cortex.simulator.replay)."""

import dataclasses

import pytest
import yaml

from cortex import conf
from cortex.pipeline.config import load_pipelines
from cortex.request.nova import NovaRequest
from cortex.rules.pci_fit import vgpu_refusal
from cortex.simulator.boards import board_inventories, board_report, mig_layouts
from cortex.simulator.cloud import SimHost
from cortex.simulator.fleet import Fleet, HostSpec, SimulationError, read_fleet
from cortex.simulator.mig import (
    alibaba_requests,
    demand_layouts,
    mean_instances,
    peak_instances,
)
from cortex.simulator.mig_replay import comparison, mig_fleet, whole_gpu_requests
from cortex.simulator.replay import replay, request_body
from cortex.simulator.trace import TraceRequest, read_trace
from tests.gpu_fakes import BOARDS

PIPELINES = load_pipelines(conf.shipped_file("pipelines.yaml"))
REPLAYED = ("kvm-gpu-topology-aware", "kvm-gpu-bin-packing")
A100 = "a100-pcie-4gpu-nvlink-pairs"


def mig_board(*layouts, board=A100):
    return {**BOARDS[board], "mig": {"layouts": [list(layout) for layout in layouts]}}


def one_host(*layouts, board=A100):
    return Fleet("one", (HostSpec("m-000", None, mig_board(*layouts, board=board), "mig"),),
                 "test")


def ask(name, arrival, profile, departure=None, vgpus=1):
    return TraceRequest(name, float(arrival), departure, 0, vgpus, 4, 8192, 1, None,
                        "dedicated", (), profile)


def held(cloud, host="m-000"):
    """``{(GPU address, instance id): profile}`` of the instances the topology shows in use."""
    topology = cloud.hosts[host].state().topology
    return {(g.pci_address, i.id): i.profile for g in topology.gpus
            for i in g.mig_instances if i.in_use}


# -- the board ---------------------------------------------------------------------------------

def test_an_operator_layout_is_placed_largest_first_and_cycled_over_the_gpus():
    board = mig_board(["3g.40gb", "4g.40gb"], ["1g.10gb"] * 7)
    layouts = mig_layouts(board)
    assert layouts[0] == [("4g.40gb", 0, 4), ("3g.40gb", 4, 4)]      # the 4g's only start
    assert layouts[1] == [("1g.10gb", s, 1) for s in range(7)]
    assert layouts[2] == layouts[0] and layouts[3] == layouts[1]
    gpu = board_report(board)["gpus"][0]
    assert gpu["mig"]["mode"] == "enabled" and gpu["virtualization_mode"] == "host_vgpu"
    assert [(i["id"], i["profile"], i["placement_start"], i["in_use"])
            for i in gpu["mig"]["instances"]] == [(1, "4g.40gb", 0, False),
                                                   (2, "3g.40gb", 4, False)]
    # one VGPU provider per instance: 2 + 7 + 2 + 7
    assert board_inventories(board)["VGPU"] == {"total": 18, "max_unit": 1}
    assert "mig" not in BOARDS[A100] and "VGPU" not in board_inventories(BOARDS[A100])


@pytest.mark.parametrize(("changes", "message"), [
    ({"mig": {"layouts": [["4g.40gb", "4g.40gb"]]}}, "does not fit"),
    ({"mig": {"layouts": [["5g.50gb"]]}}, "unknown MIG profile"),
    ({"mig": {"layouts": [["1g.10gb"]]}, "vgpu_slots": 4}, "not both"),
])
def test_a_layout_nova_cannot_have_is_refused(tmp_path, changes, message):
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump({"boards": {"b": {**BOARDS[A100], **changes}},
                                    "hosts": [{"prefix": "m", "count": 1, "board": "b"}]}))
    with pytest.raises(SimulationError, match=message):
        read_fleet(path)


# -- the replay ------------------------------------------------------------------------------

@pytest.mark.parametrize("pipeline", REPLAYED)
def test_a_mig_host_takes_a_profile_only_while_an_instance_of_it_is_free(pipeline):
    fleet = one_host(["4g.40gb", "3g.40gb"], ["1g.10gb"] * 7)   # GPUs 0, 2: 4g+3g
    trace = [ask("a", 0, "4g.40gb", departure=100.0), ask("b", 1, "4g.40gb"),
             ask("c", 2, "4g.40gb"),                  # both 4g.40gb held: refused
             ask("d", 3, "2g.20gb"),                  # no 2g.20gb in the layout: refused
             ask("e", 4, "1g.10gb"),
             ask("f", 200, "4g.40gb")]                # a left at 100: its instance is free
    seen = {}

    def observe(kind, request, cloud):
        seen[kind, request.id] = held(cloud)

    run = replay(fleet, trace, PIPELINES, pipeline, on_event=observe)
    assert [d.host for d in run.decisions] == ["m-000", "m-000", None, None, "m-000",
                                               "m-000"]
    gpu0, gpu1, gpu2 = "0000:17:00.0", "0000:31:00.0", "0000:b1:00.0"
    # the first free instance of the profile in provider order: GPU by GPU, id by id
    assert seen["arrival", "a"] == {(gpu0, 1): "4g.40gb"}
    assert seen["arrival", "b"] == {(gpu0, 1): "4g.40gb", (gpu2, 1): "4g.40gb"}
    assert seen["arrival", "e"] == {(gpu0, 1): "4g.40gb", (gpu2, 1): "4g.40gb",
                                    (gpu1, 1): "1g.10gb"}
    assert seen["departure", "a"] == {(gpu2, 1): "4g.40gb", (gpu1, 1): "1g.10gb"}
    assert seen["arrival", "f"][gpu0, 1] == "4g.40gb"             # taken again


def test_the_pipelines_filter_refuses_what_placement_would_not_offer():
    host = SimHost(HostSpec("m-000", None, mig_board(["3g.40gb", "3g.40gb"]), "mig"))

    def request(profile, name):
        names = [{"host": host.name, "hypervisor_hostname": host.name}]
        return NovaRequest.from_body(request_body(ask(name, 0, profile), names,
                                                  {host.name: 0.0}, REPLAYED[0]))

    three = request("3g.40gb", "x")
    assert "CUSTOM_NVIDIA_3G_40GB" in three.required_traits
    assert host.state().traits == {"CUSTOM_NVIDIA_3G_40GB"}
    for n in range(8):                                      # 4 GPUs x two 3g.40gb
        assert host.claim(f"r{n}", three) is not None
    assert host.claim("r8", three) is None and not host.vgpu_room(1, "3g.40gb")
    assert "0 free MIG 3g.40gb" in vgpu_refusal(host.state().topology, three.vgpu_devices)
    assert host.unallocated_gpus() == pytest.approx(4 * 1 / 7)  # a compute slice a GPU idle
    host.release("r3")
    assert host.vgpu_room(1, "3g.40gb") and not host.vgpu_room(2, "3g.40gb")
    assert host.claim("r9", three).mig == (("0000:31:00.0", 2),)
    assert host.claim("r10", request("1g.10gb", "y")) is None          # not in the layout


def test_a_time_sliced_vgpu_host_has_no_mig_instance_to_give():
    board = {**BOARDS[A100], "vgpu_slots": 4}
    host = SimHost(HostSpec("v-000", None, board, "vgpu"))
    names = [{"host": host.name, "hypervisor_hostname": host.name}]
    mig = NovaRequest.from_body(request_body(ask("x", 0, "1g.10gb"), names,
                                             {host.name: 0.0}, REPLAYED[0]))
    assert not host.vgpu_room(1, "1g.10gb") and host.vgpu_room(1)
    assert host.claim("x", mig) is None


def test_fast_replay_decides_a_mig_trace_as_the_slow_one():
    fleet = one_host(["4g.40gb", "3g.40gb"], ["2g.20gb"] * 3 + ["1g.10gb"], ["7g.80gb"])
    profiles = ["4g.40gb", "3g.40gb", "2g.20gb", "1g.10gb", "7g.80gb", "4g.40gb"]
    trace = [ask(f"r{i}", i, profiles[i % len(profiles)], departure=i + 7.5)
             for i in range(40)]
    for pipeline in REPLAYED:
        slow = replay(fleet, trace, PIPELINES, pipeline)
        fast = replay(fleet, trace, PIPELINES, pipeline, fast=True)
        assert [(d.host, d.reason) for d in slow.decisions] == \
            [(d.host, d.reason) for d in fast.decisions]
        assert 0 < slow.placed < 40


# -- requests, layouts and the comparison ----------------------------------------------------

POD_HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
              "creation_time,deletion_time,scheduled_time\n")


def test_fractional_pods_ask_the_same_profile_as_in_the_stand_alone_simulator(tmp_path):
    pods = tmp_path / "pods.csv"
    pods.write_text(POD_HEADER + "p0,1000,1024,1,1000,,LS,Running,5,50,5\n"
                    "p1,6000,2048,1,460,G2,LS,Running,1,40,1\n"
                    "p2,1000,1024,1,100,,LS,Running,4,30,4\n"
                    "p3,1000,1024,1,250,,LS,Running,6,30,6\n")
    trace = {r.id: r for r in read_trace(pods, "timeline", mig=True)}
    stand_alone = {r.name: r.profile for r in alibaba_requests(pods)}
    assert {i: r.mig_profile for i, r in trace.items() if r.vgpus} == {
        i: stand_alone[i] for i in ("p1", "p2", "p3")}
    assert (trace["p1"].vgpus, trace["p1"].products, trace["p1"].vcpus) == (1, (), 6)
    assert (trace["p0"].gpus, trace["p0"].mig_profile) == (1, None)    # a whole GPU
    assert read_trace(pods, "timeline")[0].mig_profile is None         # not asked: vGPUs


@pytest.mark.parametrize(("entry", "message"), [
    ({"gpus": 1, "mig_profile": "1g.10gb"}, "needs vgpus"),
    ({"vgpus": 1, "mig_profile": "9g.90gb"}, "unknown MIG profile"),
])
def test_a_bad_mig_request_in_a_trace_file_is_refused(tmp_path, entry, message):
    path = tmp_path / "trace.yaml"
    path.write_text(yaml.safe_dump({"requests": [
        {"id": "r", "arrival": 0, "vcpus": 2, "memory_mb": 1024, **entry}]}))
    with pytest.raises(SimulationError, match=message):
        read_trace(path)
    path.write_text(yaml.safe_dump({"requests": [
        {"id": "r", "arrival": 0, "vcpus": 2, "memory_mb": 1024, "vgpus": 1,
         "mig_profile": "3g.40gb"}]}))
    assert read_trace(path)[0].mig_profile == "3g.40gb"


def test_the_layout_follows_the_peaks_of_the_demand():
    demand = [("4g.40gb", 0, 10), ("4g.40gb", 5, 20), ("4g.40gb", 20, 30),  # peak 2
              ("7g.80gb", 0, None), ("3g.40gb", 1, 9), ("3g.40gb", 2, 9)]
    assert peak_instances(demand) == {"4g.40gb": 2, "7g.80gb": 1, "3g.40gb": 2}
    assert demand_layouts(demand, 3) == [["7g.80gb"], ["4g.40gb", "3g.40gb"],
                                         ["4g.40gb", "3g.40gb"]]
    # room past the peaks: filled by the profile furthest below its peak (ties: the
    # larger); the 1g.10gb went to slice 6, keeping slices 4-5 for a third 2g.20gb
    assert demand_layouts([("1g.10gb", 0, 1), ("2g.20gb", 0, 1), ("2g.20gb", 0, 1)], 1) == \
        [["2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb"]]
    with pytest.raises(SimulationError):
        demand_layouts([], 4)
    assert mean_instances(demand) == pytest.approx(
        {"4g.40gb": 35 / 30, "7g.80gb": 1.0, "3g.40gb": 15 / 30})
    # three brief 7g.80gb at once against one 4g.40gb held all along: the peaks give
    # the 7g.80gb two GPUs (scaled to the three), the means the 4g.40gb two
    brief = [("7g.80gb", 0, 1)] * 3 + [("4g.40gb", 0, 30)]
    assert demand_layouts(brief, 3) == [["7g.80gb"], ["4g.40gb"], ["7g.80gb"]]
    assert demand_layouts(brief, 3, sizing="mean") == [["7g.80gb"], ["4g.40gb"],
                                                       ["4g.40gb"]]
    with pytest.raises(SimulationError, match="sizing"):
        demand_layouts(demand, 3, sizing="median")


def test_the_whole_gpu_side_replays_the_same_requests_on_the_same_hosts():
    hosts = tuple(HostSpec(f"a100-{i:03d}", None, BOARDS[A100], A100) for i in range(2))
    fleet = Fleet("two", hosts, "test")
    trace = [ask("a", 0, "4g.40gb", 50.0), ask("b", 1, "1g.10gb"), ask("c", 2, "7g.80gb"),
             dataclasses.replace(ask("w", 3, None), gpus=2, vgpus=0)]      # not MIG: out
    case = comparison(fleet, trace)
    assert [r.id for r in case.mig_trace] == [r.id for r in case.whole_trace] == ["a", "b", "c"]
    for mig, whole in zip(case.mig_trace, case.whole_trace, strict=True):
        assert (whole.arrival, whole.departure, whole.vcpus, whole.memory_mb) == \
            (mig.arrival, mig.departure, mig.vcpus, mig.memory_mb)
        assert (whole.gpus, whole.vgpus, whole.mig_profile) == (mig.vgpus, 0, None)
    assert [h.name for h in case.mig_fleet.hosts] == [h.name for h in case.whole_fleet.hosts]
    assert all("mig" not in h.board for h in case.whole_fleet.hosts)
    assert len(case.layouts) == 8
    assert [h.board["mig"]["layouts"] for h in case.mig_fleet.hosts] == \
        [list(map(list, case.layouts[:4])), list(map(list, case.layouts[4:]))]
    with pytest.raises(SimulationError, match="layouts for 8 GPUs"):
        mig_fleet(fleet, case.layouts[:3])
    assert whole_gpu_requests([trace[3]]) == [trace[3]]
    # both sides place on the same hosts: the MIG side takes the three, so does whole
    for side_fleet, side_trace in ((case.mig_fleet, case.mig_trace),
                                   (case.whole_fleet, case.whole_trace)):
        run = replay(side_fleet, side_trace, PIPELINES, REPLAYED[0])
        assert run.placed == 3 and run.fleet_gpus == 8


def _one_mig_host(tmp_path):
    """A fleet file of one A100 host split 4g.40gb + 3g.40gb on each GPU; its path."""
    fleet = tmp_path / "mig-fleet.yaml"
    fleet.write_text(yaml.safe_dump({"boards": {"a100-mig": mig_board(["4g.40gb", "3g.40gb"])},
                                     "hosts": [{"prefix": "mig", "count": 1,
                                                "board": "a100-mig"}]}))
    return fleet


def test_simulate_command_replays_a_mig_fleet_file_and_a_mig_trace_file(tmp_path, capsys):
    from cortex.cmd import manage

    fleet = _one_mig_host(tmp_path)
    trace = tmp_path / "mig-trace.yaml"
    trace.write_text(yaml.safe_dump({"requests": [
        {"id": f"r{i}", "arrival": i, "vgpus": 1, "vcpus": 4, "memory_mb": 8192,
         "mig_profile": "3g.40gb"} for i in range(5)]}))
    code = manage.main(["simulate", "--fleet", str(fleet), "--trace", str(trace),
                        "--pipeline", REPLAYED[0], "--compare", REPLAYED[1]])
    assert code == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| `")]
    # four 3g.40gb instances (one a GPU): the fifth request is the first refused
    assert len(rows) == 2 and all("| 5 | 4 | 0 (4) | #5 (4) |" in r for r in rows)


def test_simulate_command_replays_alibaba_fractional_pods_as_mig_requests(tmp_path, capsys):
    from cortex.cmd import manage

    fleet = _one_mig_host(tmp_path)
    pods = tmp_path / "pods.csv"
    pods.write_text(POD_HEADER + "".join(f"p{i},2000,4096,1,460,,LS,Running,{i},900,{i}\n"
                                         for i in range(6)))       # six 4g.40gb pods
    args = ["simulate", "--fleet", str(fleet), "--trace", str(pods),
            "--pipeline", REPLAYED[0]]
    assert manage.main([*args, "--mig-requests"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines()
               if line.startswith("| `"))
    assert "| 6 | 4 | 0 (4) | #5 (4) |" in row           # four GPUs, one 4g.40gb each
    assert manage.main(args) == 0                       # as time-sliced vGPUs: no room
    row = next(line for line in capsys.readouterr().out.splitlines()
               if line.startswith("| `"))
    assert "| 6 | 0 | 0 (0) | #1 (0) |" in row
