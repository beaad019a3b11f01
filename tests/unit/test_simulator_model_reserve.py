"""A GPU model kept for the creates that can only go there, in the replays."""

from dataclasses import replace

import pytest

from cortex.simulator.cloud import SimCloud
from cortex.simulator.fleet import read_fleet
from cortex.simulator.replay import replay
from cortex.simulator.session import request_sizes, trace_sizes
from cortex.simulator.trace import read_trace
from tests.unit.test_simulator import NODES, PIPELINES

T4 = "10de:1eb8"   # the fleet file's models carry no NVML name: PCI ids name them
HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
          "deletion_time,scheduled_time\n")


@pytest.fixture
def scarce_t4(tmp_path):
    """Four 8-GPU G2 hosts, a 2-GPU T4 host, a 1-GPU V100 host; 8 pods of any GPU, then 2 T4."""
    (tmp_path / "nodes.csv").write_text(NODES)
    pods = [f"a{i},4000,8192,1,1000,,LS,Running,{i},,{i}" for i in range(8)]
    pods += [f"t{i},4000,8192,1,1000,T4,LS,Running,{10 + i},,{10 + i}" for i in range(2)]
    (tmp_path / "pods.csv").write_text(HEADER + "\n".join(pods) + "\n")
    return read_fleet(tmp_path / "nodes.csv"), read_trace(tmp_path / "pods.csv", "fill")


def test_the_trace_s_demand_is_counted_per_model(scarce_t4):
    fleet, trace = scarce_t4
    assert SimCloud(fleet).model_demand_of(trace) == {"any": 8.0, T4: 2.0}


@pytest.mark.parametrize("fast", [False, True])
def test_pods_taking_any_gpu_leave_the_pressed_t4s_to_the_t4_pods(scarce_t4, fast):
    fleet, trace = scarce_t4
    pipelines = trace_sizes(PIPELINES, trace)
    runs = {}
    for learned, demand in (("learned", {"any": 80.0, T4: 40.0}), ("nothing", {})):
        runs[learned] = replay(fleet, trace, pipelines, "kvm-gpu-topology-aware",
                               request_sizes=request_sizes(trace), model_demand=demand,
                               fast=fast)
    hosts = {name: [d.host for d in run.decisions] for name, run in runs.items()}
    # T4s pressed: 40 of 120 GPUs asked name them, 2 of the fleet's 35 GPUs are T4s
    assert "n4" not in hosts["learned"][:8] and hosts["learned"][8:] == ["n4", "n4"]
    # nothing learned: the pods of any GPU take the small hosts first, the T4 pods find none
    assert hosts["nothing"][1:3] == ["n4", "n4"] and hosts["nothing"][8:] == [None, None]


def test_the_fast_replay_decides_as_the_slow_one_with_the_reserve_weighing(scarce_t4):
    fleet, trace = scarce_t4
    pipelines = trace_sizes(PIPELINES, trace)
    demand = {"any": 80.0, T4: 40.0}
    longer = [replace(r, id=f"{r.id}-{n}", arrival=n * 100 + r.arrival)
              for n in range(4) for r in trace]
    slow, fast = (replay(fleet, longer, pipelines, "kvm-gpu-topology-aware",
                         model_demand=demand, fast=f) for f in (False, True))
    assert [(d.host, d.devices) for d in fast.decisions] == [
        (d.host, d.devices) for d in slow.decisions]
    assert 0 < slow.placed < len(longer)                     # filled: some refused
