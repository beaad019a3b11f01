"""Gangs replayed member by member and all or nothing (cortex/simulator/gangs.py)."""

from __future__ import annotations

import pytest

from cortex import conf
from cortex.pipeline.config import load_pipelines
from cortex.simulator.fleet import read_fleet
from cortex.simulator.gangs import GangSpec, gang_trace, interval, replay_gangs
from cortex.simulator.groups import Group
from tests.conftest import REPO

PIPELINES = load_pipelines(conf.shipped_file("pipelines.yaml"))
FLEET = read_fleet(REPO / "etc/cortex/simulator/fleet-leafspine.yaml")  # 64 boards
NO_RETRY = GangSpec(give_up_s=0.0)


def crowded():
    """56 of the 64 boards taken for a day, then a gang of 16: only 8 fit."""
    day = 86400.0
    return [Group("j0", 16, 8, 0.0, day), Group("j1", 16, 8, 1.0, day),
            Group("j2", 16, 8, 2.0, day), Group("j3", 8, 8, 3.0, day),
            Group("j4", 16, 8, 10.0, day)]


@pytest.mark.parametrize("all_or_nothing", [False, True])
def test_a_gang_that_does_not_fit_starts_never_and_holds_only_member_by_member(all_or_nothing):
    run = replay_gangs(FLEET, crowded(), PIPELINES, "kvm-gpu-topology-aware", NO_RETRY,
                       all_or_nothing)
    assert run.waits == {"j0": 0.0, "j1": 0.0, "j2": 0.0, "j3": 0.0, "j4": None}
    # member by member: the eight members answered hold 8 boards for the 300 s TTL
    expected = 0.0 if all_or_nothing else 8 * 8 * NO_RETRY.ttl
    assert run.held_gpu_s == expected
    assert run.calls == 56 + (1 if all_or_nothing else 9)


def test_the_trace_is_the_seeds_and_sized_for_the_load():
    spec = GangSpec(jobs=40, seed=3)
    jobs = gang_trace(FLEET, spec)
    assert jobs == gang_trace(FLEET, spec)
    assert {j.size for j in jobs} == {4, 8, 16} and {j.gpus for j in jobs} == {8}
    assert [j.arrival for j in jobs] == sorted(j.arrival for j in jobs)


def test_interval():
    assert interval([1.0, 1.0, 1.0]) == "1.0 ± 0.0"
    assert interval([2.0]) == "2.0"
    assert interval([0.0, 2.0]) == "1.0 ± 12.7"
