"""The placement simulator: boards, fleets, traces, accounting invariants, metrics, the CLI."""

import dataclasses
import json
import math
import subprocess
import sys
from collections import Counter

import pytest
import yaml

from cortex import conf
from cortex.cmd import manage
from cortex.cpuset import parse_cpuset
from cortex.knowledge.topology import topology_from_report
from cortex.pipeline.config import load_pipelines
from cortex.rules.gpu_sets import gpu_map
from cortex.simulator.boards import board_report
from cortex.simulator.fleet import SimulationError, read_fleet
from cortex.simulator.replay import replay
from cortex.simulator.session import resolve_fleet
from cortex.simulator.trace import SyntheticSpec, read_trace, synthetic_trace
from tests.conftest import REPO
from tests.gpu_fakes import BOARDS

PIPELINES = load_pipelines(conf.shipped_file("pipelines.yaml"))
SUBJECT, BASELINE = "kvm-gpu-topology-aware", "nova-baseline"


# -- boards ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["hgx-h100-8gpu", "a100-pcie-4gpu-nvlink-pairs",
                                  "l40s-4gpu-pcie"])
def test_boards_agree_with_the_agents_reports(name):
    agent = topology_from_report(json.loads(
        (REPO / "etc/cortex/topology" / f"{name}.json").read_text()))
    board = topology_from_report(board_report(BOARDS[name]))
    assert [(c.id, c.socket, c.cpus, c.memory) for c in board.cells] == \
        [(c.id, c.socket, c.cpus, c.memory) for c in agent.cells]
    assert sorted(map(sorted, board.cells[0].siblings)) == \
        sorted(map(sorted, agent.cells[0].siblings))
    assert [(g.pci_address, g.numa_node, g.device_id) for g in board.gpus] == \
        [(g.pci_address, g.numa_node, g.device_id) for g in agent.gpus]
    ours, theirs = gpu_map(board), gpu_map(agent)
    compared = 0
    for a, b in {(x.a, x.b) for x in agent.links.values()}:
        link, reported = board.link(a, b), agent.link(a, b)
        assert (link.nvlink > 0, link.topology) == (reported.nvlink > 0, reported.topology)
        i, j = theirs.index[a], theirs.index[b]
        assert ours.levels[i][j] == theirs.levels[i][j]
        compared += 1
    assert compared >= 1


def test_board_inventories_and_cpu_sets():
    hgx = topology_from_report(board_report(BOARDS["hgx-h100-8gpu"]))
    assert sum(len(c.pcpuset) for c in hgx.cells) == 200
    assert sum(len(c.cpuset) for c in hgx.cells) == 16
    l40s = topology_from_report(board_report(BOARDS["l40s-4gpu-pcie"]))
    # default: every CPU but the first core (both threads) of each socket is dedicated
    assert l40s.cells[0].pcpuset == parse_cpuset("1-31,65-95") and not l40s.cells[0].cpuset


# -- fleets and traces -----------------------------------------------------------------------

def test_shipped_fleets():
    hgx, mixed = read_fleet(resolve_fleet("hgx")), read_fleet(resolve_fleet("mixed"))
    assert (len(hgx.hosts), hgx.gpus) == (32, 256)
    assert Counter(h.board_name for h in mixed.hosts) == {
        "hgx-h100-8gpu": 12, "l40s-4gpu-pcie": 16, "a100-pcie-4gpu-nvlink-pairs": 16}
    assert mixed.gpus == 224


def test_a_bad_fleet_is_refused(tmp_path):
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump({"boards": {}, "hosts": [{"prefix": "a", "count": 0,
                                                             "board": "x"}]}))
    with pytest.raises(SimulationError, match="hosts/0/count"):
        read_fleet(path)
    path.write_text(yaml.safe_dump({"boards": {}, "hosts": [{"prefix": "a", "count": 1,
                                                             "board": "x"}]}))
    with pytest.raises(SimulationError, match="unknown board 'x'"):
        read_fleet(path)
    with pytest.raises(SimulationError, match="no shipped fleet"):
        resolve_fleet("nowhere")


NODES = """sn,cpu_milli,memory_mib,gpu,model
n0,96000,393216,8,G2
n1,96000,393216,8,G2
n2,96000,393216,8,G2
n3,96000,393216,8,G2
n4,104000,524288,2,T4
n5,8000,32768,1,V100M16
n6,32000,131072,0,
"""
PODS = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\n") + """p0,12000,16384,1,1000,,LS,Running,0,500,0
p1,6000,12288,1,460,,LS,Running,10,600,10
p2,88000,262144,8,1000,G2,LS,Running,20,700,20
p3,4000,8192,0,0,,BE,Running,30,800,30
p4,8000,16384,2,1000,V100M16|T4,LS,Running,40,900,40
p5,3000,8192,1,1000,,LS,Running,5,50,5
"""


@pytest.fixture
def alibaba(tmp_path):
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    return tmp_path


def test_alibaba_nodes_become_boards(alibaba):
    fleet = read_fleet(alibaba / "nodes.csv")
    assert [h.name for h in fleet.hosts] == ["n0", "n1", "n2", "n3", "n4", "n5"]  # no GPU: out
    g2 = next(h for h in fleet.hosts if h.name == "n0").board
    assert (g2["sockets"], g2["cores_per_socket"], g2["memory_mb_per_node"]) == (2, 24, 196608)
    assert g2["nvlink"] == {"kind": "nvswitch"} and g2["gpu"]["product_id"] == "ff02"
    v100 = next(h for h in fleet.hosts if h.name == "n5").board
    assert (v100["sockets"], v100["nvlink"]["kind"]) == (1, "none")
    # vgpu_share 0.25: the 4th G2 node of the kind is a vGPU host
    assert [h.name for h in fleet.hosts if h.board.get("vgpu_slots")] == ["n3"]
    sampled = read_fleet(alibaba / "nodes.csv", sample_nodes=2)
    assert [h.name for h in sampled.hosts] == ["n0", "n2", "n4", "n5"]
    shifted = read_fleet(alibaba / "nodes.csv", sample_nodes=2, sample_offset=1)
    assert [h.name for h in shifted.hosts] == ["n1", "n3", "n4", "n5"]   # lone kinds stay


def test_alibaba_pods_become_requests(alibaba):
    fill = read_trace(alibaba / "pods.csv", "fill")
    assert [r.id for r in fill] == ["p0", "p5", "p1", "p2", "p4"]          # by creation, GPUs
    by_id = {r.id: r for r in fill}
    assert all(r.departure is None for r in fill)
    assert (by_id["p1"].gpus, by_id["p1"].vgpus, by_id["p1"].numa_policy) == (0, 2, None)
    assert (by_id["p2"].gpus, by_id["p2"].numa_nodes, by_id["p2"].vcpus) == (8, 2, 88)
    assert by_id["p4"].products == ("1db1", "1eb8")
    timeline = read_trace(alibaba / "pods.csv", "timeline")
    assert {r.id: r.departure for r in timeline}["p5"] == 50.0


def _claim(host, index, gpus=0, vgpus=0):
    """Claim a request of ``gpus`` passthrough GPUs or ``vgpus`` vGPUs on a SimHost."""
    from cortex.request.nova import NovaRequest
    from cortex.simulator.replay import request_body
    from cortex.simulator.trace import TraceRequest

    trace = TraceRequest(f"r{index}", 0.0, None, gpus, vgpus, 2, 1024, 1,
                         "legacy" if gpus else None, "dedicated")
    names = [{"host": host.name, "hypervisor_hostname": host.name}]
    request = NovaRequest.from_body(request_body(trace, names, {host.name: 0.0}, SUBJECT))
    return host.claim(f"r{index}", request)


def test_any_gpu_may_be_shared_when_the_rules_say_so(alibaba):
    """gpu_sharing any: a GPU is passed through whole or shared by vGPUs, never both."""
    from cortex.simulator.cloud import SimHost

    overrides = {"gpu_sharing": "any", "vgpu_slots": 10}
    fleet = read_fleet(alibaba / "nodes.csv", overrides=overrides)
    assert all(h.board["gpu_sharing"] == "any" and h.board["vgpu_slots"] == 10
               for h in fleet.hosts)
    t4 = SimHost(next(h for h in fleet.hosts if h.name == "n4"))     # 2 T4 GPUs
    first, second = (g.pci_address for g in t4.base.gpus)
    assert (t4.passthrough_gpus(), t4.free_gpus(), t4.unallocated_gpus()) == (2, 2, 2.0)
    shared = _claim(t4, 0, vgpus=3)
    assert shared.vgpus == {first: 3} and t4.vgpu_room(10)    # the other GPU is whole
    assert (t4.free_gpus(), t4.unallocated_gpus()) == (1, 1.7)
    assert _claim(t4, 1, gpus=2) is None                     # the shared GPU is not free
    whole = _claim(t4, 2, gpus=1)
    assert whole.gpus == (second,) and t4.vgpu_room(7) and not t4.vgpu_room(8)
    assert _claim(t4, 3, vgpus=8) is None                    # no vGPU on a passed GPU
    pci, vgpu = t4.state("pci").topology.gpus, t4.state("vgpu").topology.gpus
    assert [(g.in_use, g.virtualization_mode) for g in pci] == [(True, "none")] * 2
    assert [(g.in_use, g.virtualization_mode, g.vgpus_in_use) for g in vgpu] == [
        (False, "host_vgpu", 3), (True, "none", 0)]
    assert t4.state("vgpu").nodes["n4"].inventories["VGPU"].total == 10   # one GPU's room
    t4.release("r0")
    assert _claim(t4, 4, gpus=1).gpus == (first,)          # whole again once unshared
    plain = SimHost(next(h for h in read_fleet(alibaba / "nodes.csv").hosts
                         if h.name == "n4"))
    assert plain.state("vgpu") is plain.state("pci")       # other boards: one state
    trace = read_trace(alibaba / "pods.csv", "fill", overrides=overrides)
    assert {r.id: r.vgpus for r in trace}["p1"] == 5          # 460 milli in tenths
    with pytest.raises(SimulationError, match="gpu_sharing must be one of"):
        read_fleet(alibaba / "nodes.csv", overrides={"gpu_sharing": "all"})


def test_weng_et_al_count_the_free_share_of_shared_gpus(alibaba):
    """Unallocated GPUs count what vGPUs leave of a GPU; the arrived demand their share."""
    overrides = {"gpu_sharing": "any", "vgpu_slots": 10}
    fleet = read_fleet(alibaba / "nodes.csv", overrides=overrides)
    trace = read_trace(alibaba / "pods.csv", "fill", overrides=overrides)
    run = replay(fleet, trace, PIPELINES, SUBJECT)
    assert run.passthrough_gpus == 35                    # every GPU of the fleet
    by_id = {d.request_id: d for d in run.decisions}
    assert by_id["p1"].host and by_id["p1"].demand == 0.5 and by_id["p0"].demand == 1.0
    assert by_id["p1"].free_gpus == 32.5          # 35 - p0's and p5's GPU - half of one


def test_gpus_shared_any_way_are_measured_over_both_kinds_at_once(alibaba):
    """vgpu_request_share: a vGPU on an idle GPU costs the whole GPU passthrough lost."""
    from cortex.plugins.base import OptionsError, build_options
    from cortex.plugins.weighers.gpu_fragmentation import GpuFragmentationWeigher
    from cortex.simulator.cloud import SimHost
    from tests.gpu_fakes import gpu_request, weigh

    overrides = {"gpu_sharing": "any", "vgpu_slots": 10}
    n0 = next(h for h in read_fleet(alibaba / "nodes.csv", overrides=overrides).hosts
              if h.name == "n0")                                   # 8 GPUs on NVSwitch
    idle, last = SimHost(n0), SimHost(n0)
    for index in range(7):
        assert _claim(last, index, gpus=1)                         # one GPU left idle
    assert all(g.shareable for g in last.state("vgpu").topology.gpus)
    options = {"cpus_per_gpu": 0.0, "memory_mb_per_gpu": 0.0,
               "request_sizes": {"1": 1.0, "8": 1.0}, "vgpu_sizes": {"5": 1.0}}
    apart = GpuFragmentationWeigher(build_options(GpuFragmentationWeigher, options))
    both = GpuFragmentationWeigher(build_options(
        GpuFragmentationWeigher, {**options, "vgpu_request_share": 0.5}))
    three = gpu_request(gpus=0, vgpus=3, numa_nodes=0, pinned=False, hosts=("n0",))
    # Apart: each GPU left with 7 of 10 vGPUs still serves a 5-vGPU request: no change.
    assert weigh(apart, idle.state("vgpu"), three) == 0.0
    assert weigh(apart, last.state("vgpu"), three) == 0.0
    # Both, half of the requests 1 or 8 whole GPUs, half 5 vGPUs; 0.3 GPU asked.
    # Idle host: F = 8 - .5 * 8 - .5 * 8 = 0 before; 7.7 - .5 * 3.5 - .5 * 7.7 after.
    # Last GPU: F = 1 - .5 * .5 - .5 * 1 = .25 before; .7 - 0 - .5 * .7 = .35 after.
    assert math.isclose(weigh(both, idle.state("vgpu"), three), -2.1 / 0.3)
    assert math.isclose(weigh(both, last.state("vgpu"), three), -0.1 / 0.3)
    # A passthrough request sees the same host with the vGPUs' GPU in use; both kinds
    # count its free room: 1 GPU of .7 free vGPUs on the once idle host takes nothing
    # from vGPU requests (-1 free, -1 useful) and halves the passthrough loss.
    _claim(idle, 9, vgpus=3)
    one = gpu_request(gpus=1, products=("ff02",), hosts=("n0",))
    pci = idle.state("pci")
    assert weigh(both, pci, one) == pytest.approx(0.5 * weigh(apart, pci, one))
    with pytest.raises(OptionsError, match="vgpu_request_share"):
        build_options(GpuFragmentationWeigher, {"vgpu_request_share": 1.5})


def test_a_bad_trace_is_refused(tmp_path):
    path = tmp_path / "trace.yaml"
    path.write_text(yaml.safe_dump({"requests": [
        {"id": "a", "arrival": 0, "vcpus": 2, "memory_mb": 1024, "gpus": 1, "vgpus": 1}]}))
    with pytest.raises(SimulationError, match="either gpus or vgpus"):
        read_trace(path)
    path.write_text(yaml.safe_dump({"requests": [{"id": "a", "arrival": -1}]}))
    with pytest.raises(SimulationError, match="requests/0"):
        read_trace(path)


def test_synthetic_traces_are_seeded_and_fit_the_fleet():
    fleet = read_fleet(resolve_fleet("mixed"))
    first = synthetic_trace(fleet, SyntheticSpec(requests=300, seed=7))
    assert first == synthetic_trace(fleet, SyntheticSpec(requests=300, seed=7))
    assert first != synthetic_trace(fleet, SyntheticSpec(requests=300, seed=8))
    assert all(r.products in ((), ("2330",)) for r in first if r.gpus == 8)   # only HGX holds 8
    assert {r.numa_nodes for r in first if r.gpus == 4 and r.products == ("26b9",)} == {2}
    assert all(r.vcpus % r.numa_nodes == 0 for r in first)
    assert Counter(r.gpus for r in first).keys() == {1, 2, 4, 8}


# -- replay: accounting ----------------------------------------------------------------------

def small_fleet(tmp_path, hosts=2):
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump({"boards": BOARDS, "hosts": [
        {"prefix": "hgx", "count": hosts, "board": "hgx-h100-8gpu"},
        {"prefix": "a100", "count": hosts, "board": "a100-pcie-4gpu-nvlink-pairs"},
        {"prefix": "l40s", "count": hosts, "board": "l40s-4gpu-pcie",
         "availability_zone": "az-2"}]}))
    return read_fleet(path)


def check_accounting(kind, request, cloud):
    """Nothing over-allocated, nothing held twice, usage = the sum of the allocations."""
    for host in cloud.hosts.values():
        state = host.state()
        for rc, inventory in state.nodes[host.name].inventories.items():
            assert 0 <= inventory.used <= inventory.capacity, (host.name, rc)
            assert inventory.used == sum(a.resources.get(rc, 0)
                                         for a in host.allocations.values())
        held = [g for a in host.allocations.values() for g in a.gpus]
        assert len(held) == len(set(held)) and set(held) == host.gpus_in_use
        for cell in state.topology.cells:
            pinned = [c for a in host.allocations.values() for c in a.pinned.get(cell.id, ())]
            assert len(pinned) == len(set(pinned)) and set(pinned) <= cell.pcpuset
            assert set(pinned) == cell.pinned_cpus
            assert 0 <= cell.memory_usage <= cell.memory
    if kind == "departure":
        assert all(request.id not in h.allocations for h in cloud.hosts.values())


@pytest.mark.parametrize("pipeline", [SUBJECT, BASELINE])
def test_replay_never_over_allocates_and_frees_on_departure(tmp_path, pipeline):
    fleet = small_fleet(tmp_path)
    trace = synthetic_trace(fleet, SyntheticSpec(requests=150, seed=3, load=1.3,
                                                 mean_life=600.0))
    clouds = []

    def observe(kind, request, cloud):
        check_accounting(kind, request, cloud)
        clouds[:] = [cloud]

    run = replay(fleet, trace, PIPELINES, pipeline, on_event=observe)
    assert len(run.decisions) == 150 and 0 < run.placed < 150     # loaded past capacity
    cloud = clouds[0]
    assert all(not h.allocations and not h.gpus_in_use and not any(h.used.values())
               for h in cloud.hosts.values())                         # everyone left
    assert all(d.devices == () for d in run.decisions if not d.host)
    placed = [d for d in run.decisions if d.host]
    assert all(len(d.devices) == d.gpus for d in placed)


MICRO = {"requests": [
    # two 2-GPU A100 guests fill the A100 host, node 0 first (Nova's cell order), then node 1
    {"id": "r1", "arrival": 0, "departure": 100, "gpus": 2, "vcpus": 8, "memory_mb": 65536,
     "products": ["20b5"]},
    {"id": "r2", "arrival": 1, "gpus": 2, "vcpus": 8, "memory_mb": 65536,
     "products": ["20b5"]},
    {"id": "r3", "arrival": 2, "gpus": 2, "vcpus": 8, "memory_mb": 65536,
     "products": ["20b5"]},                                          # no A100 left
    {"id": "r4", "arrival": 3, "departure": 4, "gpus": 1, "vcpus": 4, "memory_mb": 8192},
    {"id": "r5", "arrival": 200, "gpus": 2, "vcpus": 8, "memory_mb": 65536,
     "products": ["26b9"]},                                          # L40S: no NVLink at all
]}


@pytest.fixture
def micro(tmp_path):
    fleet = tmp_path / "micro-fleet.yaml"
    fleet.write_text(yaml.safe_dump({"boards": BOARDS, "hosts": [
        {"prefix": "a100", "count": 1, "board": "a100-pcie-4gpu-nvlink-pairs"},
        {"prefix": "l40s", "count": 1, "board": "l40s-4gpu-pcie"}]}))
    trace = tmp_path / "micro-trace.yaml"
    trace.write_text(yaml.safe_dump(MICRO))
    return fleet, trace


@pytest.mark.parametrize("pipeline", [SUBJECT, BASELINE])
def test_metrics_of_a_hand_checked_micro_trace(micro, pipeline):
    fleet_path, trace_path = micro
    run = replay(read_fleet(fleet_path), read_trace(trace_path), PIPELINES, pipeline)
    d = {x.request_id: x for x in run.decisions}
    assert [x.host for x in run.decisions] == ["a100-000", "a100-000", None, "l40s-000",
                                               "l40s-000"]
    assert d["r1"].devices == ("0000:17:00.0", "0000:31:00.0")       # node 0's, address order
    assert d["r2"].devices == ("0000:b1:00.0", "0000:ca:00.0")
    assert d["r5"].devices == ("0000:01:00.0", "0000:21:00.0")
    assert (run.placed, run.first_rejection, run.placed_before_first_rejection) == (4, 3, 2)
    assert run.multi_gpu == 3 and run.nvlink_share == 2 / 3           # r5 on PCIe only
    assert [d[r].nvlink_possible for r in ("r1", "r2", "r5")] == [True, True, False]
    assert run.nvlink_possible_share == 1.0 and run.numa_local_share == 1.0
    # free GPUs stranded for 4 after each arrival (both hosts have 4 GPUs; none has 8)
    assert [x.frag4 for x in run.decisions] == [2, 0, 0, 3, 4]
    assert [x.frag8 for x in run.decisions] == [0] * 5
    assert [x.free_gpus for x in run.decisions] == [6, 4, 4, 3, 4]


# -- the command -----------------------------------------------------------------------------

def test_simulate_command_end_to_end(micro, tmp_path):
    fleet, trace = micro
    plot = tmp_path / "out" / "micro.png"
    result = subprocess.run(
        [sys.executable, "-m", "cortex.cmd.manage", "simulate", "--fleet", str(fleet),
         "--trace", str(trace), "--pipeline", SUBJECT, "--compare", BASELINE,
         "--plot", str(plot)], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith("| `")]
    assert [r.split("|")[1].strip() for r in rows] == [f"`{SUBJECT}`", f"`{BASELINE}`"]
    assert all("| 5 | 4 | 7 (0) | #3 (2) | #3 / none | 3 | 66.7 % | 100.0 % | 100.0 % |" in r
               for r in rows)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10000


def test_simulate_command_with_two_fleets_writes_a_plot_each(micro, tmp_path, capsys):
    fleet, trace = micro
    second = tmp_path / "second.yaml"
    second.write_text(fleet.read_text())
    code = manage.main(["simulate", "--fleet", str(fleet), "--fleet", str(second), "--trace",
                        str(trace), "--pipeline", BASELINE, "--plot", str(tmp_path / "p.png")])
    assert code == 0
    assert (tmp_path / "p-micro-fleet.png").is_file() and (tmp_path / "p-second.png").is_file()
    assert capsys.readouterr().out.count("### fleet") == 2


@pytest.mark.parametrize("args, message", [
    (["--fleet", "nowhere", "--trace", "synthetic"], "no shipped fleet"),
    (["--fleet", "hgx", "--trace", "synthetic", "--compare", "nope"], "unknown pipeline 'nope'"),
    (["--fleet", "hgx", "--trace", "missing.yaml"], "missing.yaml"),
])
def test_simulate_command_refuses_bad_input_in_one_line(args, message, capsys):
    assert manage.main(["simulate", "--pipeline", SUBJECT, *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_rolling_means_of_the_plot():
    from cortex.simulator.report import rolling

    assert rolling([2, 4, 6, 8], window=2) == [2, 3, 5, 7]
    assert rolling([], window=3) == []


def test_fill_mode_can_shuffle_the_trace(alibaba):
    from cortex.simulator.session import SimulationSpec, load_trace

    fleet = read_fleet(alibaba / "nodes.csv")
    spec = SimulationSpec([], str(alibaba / "pods.csv"), [], mode="fill", shuffle=3)
    name, requests = load_trace(spec, fleet)
    assert "shuffled (seed 3)" in name and [r.arrival for r in requests] == [0, 1, 2, 3, 4]
    assert sorted(r.id for r in requests) == ["p0", "p1", "p2", "p4", "p5"]
    assert requests == load_trace(spec, fleet)[1]
    with pytest.raises(SimulationError, match="--mode fill"):
        load_trace(SimulationSpec([], str(alibaba / "pods.csv"), [], shuffle=3), fleet)


def test_groups_stay_in_their_domain_with_the_network_steps_and_not_without():
    from cortex.simulator.groups import GroupSpec, group_trace, replay_groups

    fleet = read_fleet(resolve_fleet("leafspine"))
    groups = group_trace(fleet, GroupSpec(groups=12, load=0.5, seed=3))
    pipelines = load_pipelines(conf.shipped_file("pipelines.yaml"))
    aware = replay_groups(fleet, groups, pipelines, "kvm-gpu-topology-aware", seed=3)
    blind = replay_groups(fleet, groups, pipelines, "kvm-gpu-bin-packing", seed=3)
    assert aware.calls == blind.calls == sum(g.size for g in groups)
    assert len(aware.placed) == len(blind.placed) == len(groups)  # half load: all fit
    assert aware.share_within_rule() > blind.share_within_rule()
    assert aware.share_within_rule((2, 4)) == 1.0


def test_within_rule_needs_few_enough_connected_leaves():
    from cortex.simulator.groups import Group, GroupRun

    run = GroupRun("p", adjacency={"a": frozenset({"b"}), "b": frozenset({"a", "c"}),
                                   "c": frozenset({"b"})})
    eight = Group("g", 8, 8, 0.0, 1.0)
    assert run.within_rule(eight, frozenset({"a", "b"}))
    assert not run.within_rule(eight, frozenset({"a", "c"}))       # not adjacent
    assert not run.within_rule(Group("g", 4, 8, 0.0, 1.0), frozenset({"a", "b"}))


# -- over seeds, machine-readable -------------------------------------------------------------

def test_unallocated_gpus_as_the_arrived_workload_grows(micro):
    """Weng et al.'s measure on the micro trace: 8 passthrough GPUs, 2+2+2+1+2 arriving."""
    fleet_path, trace_path = micro
    run = replay(read_fleet(fleet_path), read_trace(trace_path), PIPELINES, SUBJECT)
    assert run.passthrough_gpus == 8
    assert run.unallocated_pct_at(25) == 75.0   # after r1: 6 free
    assert run.unallocated_pct_at(50) == 50.0   # after r2 (4 arrived): 4 free
    assert run.unallocated_pct_at(100) == 50.0  # after r5 (9 arrived): 4 free
    assert run.unallocated_pct_at(120) is None  # 9.6 GPUs never arrive
    levels = [0, 10, 25, 30, 50, 60, 100, 110, 120, 150]
    assert run.unallocated_curve(levels) == [run.unallocated_pct_at(v) for v in levels]
    assert run.unallocated_curve([]) == []


def test_spread_over_seeds_skips_what_a_seed_lacks():
    from cortex.simulator.report import spread

    got = spread([[1.0, 5.0, None], [3.0, math.nan, 2.0, 7.0], [2.0, 4.0]])
    assert got[:3] == [(1.0, 2.0, 3.0), (4.0, 4.5, 5.0), (2.0, 2.0, 2.0)]
    assert got[3] == (7.0, 7.0, 7.0)
    assert all(math.isnan(v) for v in spread([[None], [math.nan]])[0])
    assert spread([]) == []


def test_the_plot_shows_every_seed(alibaba, tmp_path):
    """Two shuffles of the Alibaba pods: one plot, the seeds' spread on every panel."""
    plot = tmp_path / "seeds.png"
    code = manage.main(["simulate", "--fleet", str(alibaba / "nodes.csv"), "--trace",
                        str(alibaba / "pods.csv"), "--mode", "fill", "--shuffle", "1",
                        "--seeds", "2", "--pipeline", SUBJECT, "--compare", BASELINE,
                        "--plot", str(plot)])
    assert code == 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10000


def test_interval_is_students_t():
    from cortex.simulator.report import interval

    found = interval([1.0, 2.0, 3.0])
    half = 4.302652729911275 / 3 ** 0.5          # t(0.975, 2) * s / sqrt(n), s = 1
    assert found["mean"] == 2.0 and found["ci95"] == pytest.approx([2 - half, 2 + half])
    assert interval([5.0, 5.0])["ci95"] == [5.0, 5.0]
    assert interval([4.0]) == {"mean": 4.0, "ci95": None}


def test_simulate_json_over_seeds(capsys):
    code = manage.main(["simulate", "--fleet", "hgx", "--trace", "synthetic", "--requests",
                        "120", "--load", "1.5", "--mode", "fill", "--pipeline", SUBJECT,
                        "--compare", BASELINE, "--seeds", "3", "--format", "json"])
    assert code == 0
    scenario, = json.loads(capsys.readouterr().out)["scenarios"]
    assert scenario["trace"].endswith("3 seeds") and scenario["fleet"] == "fleet-hgx"
    subject, baseline = scenario["pipelines"][SUBJECT], scenario["pipelines"][BASELINE]
    assert subject["seeds"] == baseline["seeds"] == 3
    placed = subject["placed_before_first_rejection"]
    assert placed["ci95"][0] <= placed["mean"] <= placed["ci95"][1]
    assert set(subject["unallocated_gpu_pct_at"]) == {"50", "100", "120"}
    assert 0 <= subject["unallocated_gpu_pct_at"]["50"] <= 100
    assert subject["nvlink_complete_pct"] is not None and subject["numa_local_pct"] is not None
    paired = subject["paired_vs"][BASELINE]
    assert set(paired) == {"mean_diff_pct", "ci95"} and "paired_vs" not in baseline


def test_the_seeds_of_a_replayed_trace_file_are_refused(micro, capsys):
    fleet, trace = micro
    assert manage.main(["simulate", "--fleet", str(fleet), "--trace", str(trace),
                        "--pipeline", SUBJECT, "--seeds", "2"]) == 2
    assert "--seeds needs the synthetic trace or --shuffle" in capsys.readouterr().err


def test_paired_differences_are_per_seed():
    from cortex.simulator.report import summary
    from cortex.simulator.session import SimulationSpec, simulate

    spec = SimulationSpec(fleets=["hgx"], trace="synthetic", pipelines=[SUBJECT, BASELINE],
                          mode="fill", seeds=3,
                          synthetic=SyntheticSpec(requests=120, seed=4, load=1.5))
    result, = simulate(spec)
    assert len(result.by_seed) == 3 and result.by_seed[0] is result.runs
    diffs = [100 * (s.placed_before_first_rejection - b.placed_before_first_rejection)
             / max(1, b.placed_before_first_rejection) for s, b in result.by_seed]
    paired = summary(result.by_seed)[SUBJECT]["paired_vs"][BASELINE]
    assert paired["mean_diff_pct"] == pytest.approx(sum(diffs) / 3)
    assert [len({r.pipeline for r in seed}) for seed in result.by_seed] == [2, 2, 2]


def test_a_tracker_in_another_device_order_makes_prediction_errors_visible():
    """Shuffled device pools: nova-compute hands out GPUs the weighers did not predict."""
    fleet = read_fleet(resolve_fleet("mixed"))
    trace = synthetic_trace(fleet, SyntheticSpec(requests=150, seed=3, load=1.0))
    pipelines = load_pipelines(conf.shipped_file("pipelines.yaml"))
    exact = replay(fleet, trace, pipelines, SUBJECT)
    shuffled = replay(fleet, trace, pipelines, SUBJECT, device_order="shuffled", seed=1)
    assert exact.misprediction_share == 0.0, "PCI order is the weighers' own model"
    assert shuffled.misprediction_share > 0, "packing leaves few choices, but some"
    again = replay(fleet, trace, pipelines, SUBJECT, device_order="shuffled", seed=1)
    assert [d.devices for d in again.decisions] == [d.devices for d in shuffled.decisions]
    for decision in shuffled.decisions:
        if decision.host and decision.gpus >= 2 and decision.mispredicted is False:
            assert decision.nvlink is not None
    with pytest.raises(SimulationError, match="unknown device order"):
        replay(fleet, trace[:1], pipelines, SUBJECT, device_order="reversed")


def test_shuffled_candidates_let_ties_fall_anywhere_the_same_for_every_pipeline():
    """32 empty HGX hosts weigh the same for Nova: its first pick is the first offered."""
    import random

    fleet = read_fleet(resolve_fleet("hgx"))
    trace = synthetic_trace(fleet, SyntheticSpec(requests=6, seed=2, load=1.0))
    names = [h.name for h in fleet.hosts]
    in_order = replay(fleet, trace, PIPELINES, BASELINE)
    assert in_order.decisions[0].host == names[0]
    shuffled = replay(fleet, trace, PIPELINES, BASELINE, candidate_order="shuffled", seed=4)
    first = random.Random("4:0").sample(names, len(names))[0]
    assert first != names[0] and shuffled.decisions[0].host == first
    again = replay(fleet, trace, PIPELINES, BASELINE, candidate_order="shuffled", seed=4)
    assert [d.host for d in again.decisions] == [d.host for d in shuffled.decisions]
    other = replay(fleet, trace, PIPELINES, BASELINE, candidate_order="shuffled", seed=5)
    assert [d.host for d in other.decisions] != [d.host for d in shuffled.decisions]
    with pytest.raises(SimulationError, match="unknown candidate order"):
        replay(fleet, trace[:1], PIPELINES, BASELINE, candidate_order="reversed")


def test_fragmentation_can_measure_against_the_traces_own_sizes():
    from cortex.simulator.session import SimulationSpec, simulate, trace_sizes

    pipelines = load_pipelines(conf.shipped_file("pipelines.yaml"))
    changed = trace_sizes(pipelines)
    step = next(s for s in changed.pipelines[SUBJECT].weighers
                if s.name == "weigher_gpu_fragmentation")
    assert (step.plugin.options.sizes_from, step.plugin.options.min_learned) == ("demand", 1)
    assert changed.pipelines[BASELINE] is pipelines.pipelines[BASELINE], "no such weigher"
    assert step.plugin.options.vgpu_sizes == {"1": 0.5, "2": 0.3, "4": 0.2}   # no vGPUs
    from cortex.simulator.trace import TraceRequest

    fractions = [TraceRequest(f"v{i}", 0.0, None, 0, size, 2, 1024)
                 for i, size in enumerate((46, 46, 10, 100))]
    shared = trace_sizes(pipelines, fractions)
    step = next(s for s in shared.pipelines[SUBJECT].weighers
                if s.name == "weigher_gpu_fragmentation")
    assert step.plugin.options.vgpu_sizes == {"10": 1.0, "46": 2.0, "100": 1.0}
    spec = SimulationSpec(fleets=["mixed"], trace="synthetic", pipelines=[SUBJECT],
                          mode="fill", fragmentation_sizes="trace",
                          synthetic=SyntheticSpec(requests=60, seed=2, load=1.0))
    result, = simulate(spec)
    assert result.runs[0].placed > 0
    with pytest.raises(SimulationError, match="fragmentation sizes"):
        simulate(dataclasses.replace(spec, fragmentation_sizes="learned"))
