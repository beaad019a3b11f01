"""MIG hosts in the simulator: on-demand instances, three policies, Alibaba pods as requests."""

import pytest

from cortex.simulator.fleet import SimulationError
from cortex.simulator.mig import (
    MigFleet,
    MigRequest,
    alibaba_requests,
    replay,
    synthetic_requests,
)


def req(name, profile, start, end=float("inf"), count=1):
    return MigRequest(name, profile, count, start, end)


def test_small_instances_share_a_gpu_under_mig_and_take_whole_gpus_without():
    stream = [req(f"r{i}", "1g.10gb", i) for i in range(8)]
    mig = replay(stream, MigFleet(1, 1), "slot-aware")
    assert (mig.accepted, mig.refused) == (7, 1)     # seven 1g.10gb a GPU, slice 7 idle
    whole = replay(stream, MigFleet(1, 1), "whole-gpu")
    assert (whole.accepted, whole.refused) == (1, 7)
    assert whole.refused_by_profile == {"1g.10gb": 7}


def test_slot_aware_placement_keeps_room_that_first_fit_spends():
    # a 3g.40gb then a 4g.40gb: first-fit puts the 3g at 0, where the 4g must start
    stream = [req("a", "3g.40gb", 0), req("b", "4g.40gb", 1)]
    assert replay(stream, MigFleet(1, 1), "slot-first-fit").accepted == 1
    assert replay(stream, MigFleet(1, 1), "slot-aware").accepted == 2


def test_departures_free_instances_before_the_next_arrival():
    stream = [req("a", "7g.80gb", 0, 10), req("b", "7g.80gb", 10, 20), req("c", "4g.40gb", 15)]
    fleet = MigFleet(1, 1)
    result = replay(stream, fleet, "slot-aware")
    assert (result.accepted, result.refused) == (2, 1)
    assert fleet.slots == [[(0, 8)]]


def test_multi_gpu_requests_take_whole_empty_gpus_on_one_host():
    fleet = MigFleet(2, 2)
    assert fleet.place(req("a", "1g.10gb", 0), "slot-aware") == [(0, 6, 1)]
    # host 0 has one empty GPU left, host 1 two: the pair goes to host 1
    assert fleet.place(req("b", "7g.80gb", 1, count=2), "slot-aware") == [(2, 0, 8), (3, 0, 8)]
    assert fleet.place(req("c", "7g.80gb", 2, count=2), "slot-aware") is None
    fleet.release([(2, 0, 8), (3, 0, 8)])
    assert fleet.slots == [[(6, 1)], [], [], []]


def test_unknown_policy_and_empty_fleet_are_refused():
    with pytest.raises(SimulationError, match="unknown MIG policy"):
        MigFleet(1, 1).place(req("a", "1g.10gb", 0), "worst-fit")
    with pytest.raises(SimulationError):
        MigFleet(0, 8)


def test_alibaba_pods_map_to_profiles_by_compute_share(tmp_path):
    pods = tmp_path / "pods.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
        "creation_time,deletion_time,scheduled_time\n"
        "p0,1000,1024,1,1000,,LS,Running,5,50,5\n"
        "p1,1000,1024,1,460,,LS,Running,1,40,1\n"
        "p2,1000,1024,0,0,,LS,Running,2,30,2\n"
        "p3,1000,1024,8,1000,,LS,Running,3,30,3\n"
        "p4,1000,1024,1,100,,LS,Running,4,30,4\n")
    got = [(r.name, r.profile, r.count, r.start) for r in alibaba_requests(pods)]
    assert got == [("p1", "4g.40gb", 1, 1.0), ("p3", "7g.80gb", 8, 3.0),
                   ("p4", "1g.10gb", 1, 4.0), ("p0", "7g.80gb", 1, 5.0)]
    with pytest.raises(SimulationError):
        alibaba_requests(tmp_path / "missing.csv")


def test_synthetic_stream_is_seeded_and_draws_from_the_mix():
    mix = [req("a", "1g.10gb", 0), req("b", "3g.40gb", 0)]
    one = synthetic_requests(mix, 50, gpus=8, load=1.0, seed=3)
    assert one == synthetic_requests(mix, 50, gpus=8, load=1.0, seed=3)
    assert one != synthetic_requests(mix, 50, gpus=8, load=1.0, seed=4)
    assert {r.profile for r in one} <= {"1g.10gb", "3g.40gb"}
    assert all(r.end > r.start for r in one)
    assert [r.start for r in one] == sorted(r.start for r in one)
