"""The fast replay (the slow one's decisions) and the FGD and best-fit policies."""

import dataclasses
import random

import numpy as np
import pytest

from cortex.simulator.cloud import SimCloud
from cortex.simulator.fleet import read_fleet
from cortex.simulator.policies import PolicyOrder, Workload, host_capacity
from cortex.simulator.replay import replay
from cortex.simulator.trace import SyntheticSpec, TraceRequest, read_trace, synthetic_trace
from tests.unit.test_simulator import NODES, PIPELINES, PODS, check_accounting, small_fleet


def _placements(run):
    return [(d.host, d.devices, d.frag4, d.frag8, d.free_gpus) for d in run.decisions]


@pytest.mark.parametrize("pipeline", ["kvm-gpu-topology-aware", "kvm-gpu-bin-packing",
                                      "nova-baseline", "fgd"])
def test_the_fast_replay_decides_as_the_slow_one(tmp_path, pipeline):
    """Answers carried between events: every placement (host, devices) and measure equal."""
    fleet = small_fleet(tmp_path, hosts=2)
    trace = synthetic_trace(fleet, SyntheticSpec(requests=40, seed=5, load=1.2,
                                                 mean_life=900.0))
    slow = replay(fleet, trace, PIPELINES, pipeline)
    fast = replay(fleet, trace, PIPELINES, pipeline, fast=True)
    assert _placements(fast) == _placements(slow)
    assert 0 < slow.placed < len(trace)                      # some rejected: a full fleet


def _shared_alibaba(tmp_path, copies=3):
    """An Alibaba fleet whose GPUs are shared any way, and its pods several times over."""
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    overrides = {"gpu_sharing": "any", "vgpu_slots": 10}
    fleet = read_fleet(tmp_path / "nodes.csv", overrides=overrides)
    pods = read_trace(tmp_path / "pods.csv", "fill", overrides=overrides)
    rng = random.Random(2)
    trace = [dataclasses.replace(rng.choice(pods), id=f"t{i}", arrival=float(i))
             for i in range(12 * copies)]
    return fleet, trace


@pytest.mark.parametrize("pipeline", ["kvm-gpu-topology-aware", "fgd"])
def test_the_fast_replay_decides_as_the_slow_one_with_gpus_shared_any_way(tmp_path, pipeline):
    """Both kinds of request (whole GPUs, vGPUs) see their own chain of views."""
    fleet, trace = _shared_alibaba(tmp_path)
    slow = replay(fleet, trace, PIPELINES, pipeline)
    fast = replay(fleet, trace, PIPELINES, pipeline, fast=True)
    assert _placements(fast) == _placements(slow)
    assert any(d.vgpus and d.host for d in slow.decisions)
    assert any(d.gpus and d.host for d in slow.decisions)


def _request(gpus=0, vgpus=0, vcpus=4, memory_mb=8192, products=()):
    return TraceRequest("r", 0.0, None, gpus, vgpus, vcpus, memory_mb, 1,
                        "legacy" if gpus else None, "dedicated", products)


def test_fragmentation_against_a_workload_by_hand():
    """Weng et al.'s measure: what each kind of task could not use, weighted by its share."""
    trace = [_request(gpus=1)] * 2 + [_request(vgpus=5)] + [_request(gpus=4, vcpus=64)]
    workload = Workload.of(trace, vgpu_slots=10)
    assert sorted(workload.weight.tolist()) == [0.25, 0.25, 0.5]
    free = np.array([1.0, 1.0, 0.3, 0.0])
    # 1 GPU (share 0.5): fits, the 0.3 left on a shared GPU is lost to it -> 0.3
    # half a GPU (0.25): fits on a whole GPU, the 0.3 is below half a GPU -> 0.3
    # 4 GPUs and 64 CPUs (0.25): only 2 whole GPUs and 32 CPUs -> all 2.3 free are lost
    assert workload.fragmentation(free, 32, 65536, "ff02") == pytest.approx(
        0.5 * 0.3 + 0.25 * 0.3 + 0.25 * 2.3)
    # a model the kind does not take loses the host's free capacity to it
    picky = Workload.of([_request(gpus=1, products=("1eb8",))], vgpu_slots=10)
    assert picky.fragmentation(free, 32, 65536, "ff02") == pytest.approx(2.3)
    assert picky.fragmentation(free, 32, 65536, "1eb8") == pytest.approx(0.3)


def test_fgd_places_where_fragmentation_grows_least(tmp_path):
    """A fraction goes to the GPU already shared, not to an idle one (bin-packing would not
    tell them apart by GPUs, FGD does by what the workload loses)."""
    fleet, _ = _shared_alibaba(tmp_path)
    cloud = SimCloud(fleet)
    g2 = [n for n in cloud.hosts if cloud.hosts[n].spec.board["gpu"]["product_id"] == "ff02"]
    first, second = g2[:2]
    workload = Workload.of([_request(gpus=1)] * 3 + [_request(vgpus=4)], vgpu_slots=10)
    from tests.unit.test_simulator import _claim

    assert _claim(cloud.hosts[second], 0, vgpus=4) is not None        # 0.6 left on a GPU
    order = PolicyOrder("fgd", workload)
    ranked = order.order([first, second], cloud.hosts, _request(vgpus=4))
    assert ranked[0] == second                   # 0.6 -> 0.2: no whole GPU broken
    # on the idle host it would break a whole GPU, which whole-GPU tasks then lose
    ranked = order.order([first, second], cloud.hosts, _request(gpus=1))
    assert ranked == [first, second] or ranked == [second, first]
    free, cpus, memory = host_capacity(cloud.hosts[second])
    assert sorted(free.tolist())[0] == pytest.approx(0.6) and cpus > 0 and memory > 0
    # best-fit: the fuller host first
    assert PolicyOrder("best-fit", workload).order(
        [first, second], cloud.hosts, _request(vgpus=4))[0] == second


@pytest.mark.parametrize("policy", ["fgd", "best-fit"])
def test_policies_never_over_allocate(tmp_path, policy):
    fleet = small_fleet(tmp_path)
    trace = synthetic_trace(fleet, SyntheticSpec(requests=80, seed=3, load=1.3,
                                                 mean_life=600.0))
    run = replay(fleet, trace, PIPELINES, policy, fast=True, on_event=check_accounting)
    assert 0 < run.placed < len(trace) and run.pipeline == policy


def test_inflate_draws_until_the_share_of_the_gpus_is_asked(tmp_path):
    """Weng et al.'s workload: drawn with replacement, seeded, until level x GPUs arrived."""
    from cortex.simulator.trace import gpu_demand, inflate

    _, pods = _shared_alibaba(tmp_path, copies=1)
    drawn = inflate(pods, 20, 1.5, seed=4, vgpu_slots=10)
    demand = [gpu_demand(r, 10) for r in drawn]
    assert sum(demand) >= 30 > sum(demand[:-1])
    assert len({r.id for r in drawn}) == len(drawn)
    assert all(r.departure is None and r.arrival == i for i, r in enumerate(drawn))
    assert [r.id for r in inflate(pods, 20, 1.5, 4, 10)] == [r.id for r in drawn]
    assert [r.id for r in inflate(pods, 20, 1.5, 5, 10)] != [r.id for r in drawn]


def test_a_session_replays_policies_on_an_inflated_workload(tmp_path):
    from cortex.simulator.session import SimulationSpec, simulate

    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    spec = SimulationSpec([str(tmp_path / "nodes.csv")], str(tmp_path / "pods.csv"),
                          ["kvm-gpu-topology-aware", "fgd", "best-fit"], mode="fill",
                          inflate=1.2, seeds=2, gpu_sharing="any", vgpu_slots=10)
    [found] = simulate(spec)
    assert [r.pipeline for r in found.runs] == ["kvm-gpu-topology-aware", "fgd", "best-fit"]
    assert len(found.by_seed) == 2 and "drawn to 120 %" in found.trace_name
    first, second = ([d.request_id for d in seed[0].decisions] for seed in found.by_seed)
    assert first != second                                     # a workload per seed
    assert all(run.unallocated_pct_at(100) is not None for run in found.runs)


def test_the_cloud_s_view_is_every_host_s_state_now(tmp_path):
    """Views made from the hosts changed since the last one hold every host's state now.

    After each event of an inflated workload on GPUs shared any way (both kinds of view,
    arrivals and departures): each host's state in the view is the one the host answers,
    object for object, in the fleet's order; no change, the same view; and a host's vGPU
    room is one GPU with that many free vGPUs, as Placement's providers say.
    """
    fleet, trace = _shared_alibaba(tmp_path)
    seen = []

    def check(_kind, _request, cloud):
        for kind in ("pci", "vgpu"):
            cloud.kind = kind
            view = cloud.view()
            assert list(view.hosts) == list(cloud.hosts)
            assert all(view.hosts[n] is h.state(kind) for n, h in cloud.hosts.items())
            assert cloud.view() is view
            seen.append(view.version)
        for host in cloud.hosts.values():
            free = host._vgpu_free() if host.vgpu_slots else []
            for count in (1, 5, 10):
                assert host.vgpu_room(count) == any(f >= count for f in free)

    leaving = [dataclasses.replace(r, departure=r.arrival + 7) for r in trace]
    run = replay(fleet, leaving, PIPELINES, "kvm-gpu-topology-aware", on_event=check,
                 fast=True)
    assert run.placed and len(set(seen)) > 2
