"""Placeable instances (cortex.simulator.capacity) against a count of one instance at a time.

The brute force places one instance per pipeline call, each on the answer's first host,
with the instances placed so far held, until a call finds no host: what placing a
commitment does (:func:`cortex.simulator.commitments.place`). The capacity count's
rounds must give the same hosts the same numbers, with commitments and the failover
room on and off, on the simulator's HGX fleet and a mixed one.
"""

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from types import MappingProxyType

import pytest

from cortex.conf import shipped_file
from cortex.ids import new_uuid
from cortex.knowledge.commitments import Commitment
from cortex.knowledge.reservations import Reservation, with_reservations
from cortex.pipeline.config import load_pipelines
from cortex.request.nova import NovaRequest
from cortex.scheduler.promise import predicted_gpus
from cortex.scheduler.service import SchedulerService, simulation
from cortex.simulator.capacity import (
    Shape,
    ShapeInvalid,
    count,
    empty_view,
    flavor_gpus,
    flavor_shape,
    request_body,
    zone_hosts,
)
from cortex.simulator.cloud import SimCloud
from cortex.simulator.commitments import CommitmentRefused, place
from cortex.simulator.fleet import read_fleet
from cortex.simulator.session import resolve_fleet

NOW = datetime(2026, 11, 1, 12, tzinfo=UTC)
PIPELINES = load_pipelines(shipped_file("pipelines.yaml"))
FAILOVER = {"filter_failover_room": {"hosts": 1}}
SHAPES = [Shape(64, 262144, 8), Shape(8, 32768, 1), Shape(16, 65536, 2), Shape(32, 131072, 4),
          Shape(4, 8192)]


class Fixed:
    def __init__(self, view):
        self._view = view

    def view(self):
        return self._view


def brute_force(view, shape, zone, step_options=None, pipelines=PIPELINES, now=NOW):
    """``{host: instances}`` placed one per call, each on the first host answered."""
    service = SchedulerService(pipelines, Fixed(view))
    hosts = zone_hosts(view, zone)
    placed, found = [], {}
    while True:
        request = NovaRequest.from_body(request_body(shape, hosts, view, f"b{len(placed)}"))
        decision = service.schedule(request, simulation(now=now, holds=tuple(placed),
                                                        step_options=step_options))
        if not decision.result:
            return found
        host = decision.result[0]
        state = with_reservations(view, placed, now).hosts[host]
        placed.append(Reservation(new_uuid(), host, None, None,
                                  MappingProxyType(dict(request.resources)),
                                  predicted_gpus(state, request), now, now + timedelta(days=1)))
        found[host] = found.get(host, 0) + 1


@pytest.fixture(scope="module")
def hgx():
    """The HGX fleet (16 boards in az-1, 16 in az-2) with some of its GPUs taken."""
    cloud = SimCloud(read_fleet(resolve_fleet("hgx")))
    names = sorted(cloud.hosts)
    for index, host in enumerate(names[::3]):
        gpus = (1, 2, 4, 8)[index % 4]
        request = NovaRequest.from_body(request_body(Shape(8 * gpus, 16384 * gpus, gpus),
                                                     [host], cloud.view(), f"vm-{host}"))
        assert cloud.hosts[host].claim(f"vm-{host}", request) is not None
    return cloud.view()


def committed(view, project="owner"):
    """``view`` with a commitment of two 4-GPU instances for ``project`` in az-2."""
    service = SchedulerService(PIPELINES, Fixed(view))
    spec = Commitment("", project, "az-2", 32, 131072, 4, (), 2, NOW - timedelta(hours=1),
                      NOW + timedelta(days=30), NOW)
    made = place(service, spec, NOW)
    return replace(view, commitments=(made,))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s.gpus}g{s.vcpus}c")
@pytest.mark.parametrize("failover", [False, True], ids=["no-failover", "failover"])
def test_the_count_is_the_one_by_one_count(hgx, shape, failover):
    options = FAILOVER if failover and shape.gpus else None  # the GPU pipeline's step
    for view in (hgx, empty_view(hgx)):
        for zone in ("az-1", "az-2"):
            found = count(SchedulerService(PIPELINES, Fixed(view)), view, shape, zone, NOW,
                          step_options=options)
            assert found.complete and found.limited_by is not None
            assert dict(found.hosts) == brute_force(view, shape, zone, options)
            assert found.count == sum(found.hosts.values())


@pytest.mark.parametrize("project,fewer", [("someone", True), ("owner", False)])
def test_other_projects_committed_room_is_used_the_owners_is_not(hgx, project, fewer):
    view = committed(hgx)
    shape = replace(Shape(32, 131072, 4), project_id=project)
    service = SchedulerService(PIPELINES, Fixed(view))
    with_room = count(service, view, shape, "az-2", NOW)
    assert dict(with_room.hosts) == brute_force(view, shape, "az-2")
    without = count(service, hgx, shape, "az-2", NOW)
    assert (with_room.count == without.count - 2) is fewer
    assert (with_room.count == without.count) is not fewer


def test_a_commitment_of_the_count_fits_and_one_more_does_not(hgx):
    service = SchedulerService(PIPELINES, Fixed(hgx))
    found = count(service, hgx, Shape(16, 65536, 2), "az-1", NOW)
    spec = Commitment("", "p", "az-1", 16, 65536, 2, (), found.count, NOW,
                      NOW + timedelta(days=1), NOW)
    assert len(place(service, spec, NOW).holds) == found.count
    with pytest.raises(CommitmentRefused):
        place(service, replace(spec, count=found.count + 1), NOW)


def test_the_empty_fleet_holds_more_and_names_what_stops_it(hgx):
    service = SchedulerService(PIPELINES, Fixed(hgx))
    shape = Shape(64, 262144, 8)
    now, empty = count(service, hgx, shape, None, NOW), count(
        service, empty_view(hgx), shape, None, NOW)
    assert now.count < empty.count == 32  # one 8-GPU instance per empty board
    assert str(empty.limited_by).startswith("filter_gpu_capacity: ")
    assert now.pipeline == "kvm-gpu-topology-aware"


def test_the_failover_room_takes_no_instance(hgx):
    view = empty_view(hgx)
    service = SchedulerService(PIPELINES, Fixed(view))
    off = count(service, view, Shape(64, 262144, 8), "az-1", NOW)
    on = count(service, view, Shape(64, 262144, 8), "az-1", NOW, step_options=FAILOVER)
    assert on.count == off.count - 1
    (kept,) = set(off.hosts) - set(on.hosts)
    assert kept in zone_hosts(view, "az-1")


def test_committed_room_is_named_when_it_stops_the_next_instance(hgx):
    view = committed(empty_view(hgx))
    service = SchedulerService(PIPELINES, Fixed(view))
    found = count(service, view, replace(Shape(32, 131072, 4), project_id="someone"),
                  "az-2", NOW)
    assert found.limited_by.cause == "commitments"


def test_the_limit_stops_the_count(hgx):
    service = SchedulerService(PIPELINES, Fixed(hgx))
    found = count(service, hgx, Shape(8, 32768, 1), None, NOW, limit=5)
    assert found.count == 5 and not found.complete and found.limited_by is None


@pytest.mark.parametrize("values,word", [
    ({"vcpus": 0, "memory_mb": 1}, "vcpus"), ({"vcpus": 1, "memory_mb": 0}, "memory_mb"),
    ({"vcpus": 1, "memory_mb": 1, "gpus": 65}, "gpus"),
    ({"vcpus": 1, "memory_mb": 1, "products": ("h100",)}, "products"),
    ({"vcpus": 3, "memory_mb": 4, "numa_nodes": 2}, "divide"),
    ({"vcpus": 1, "memory_mb": 1, "mem_page_size": "huge"}, "mem_page_size"),
    ({"vcpus": 1, "memory_mb": 1, "project_id": "a b"}, "project_id"),
    ({"vcpus": True, "memory_mb": 1}, "vcpus")])
def test_shapes_outside_their_bounds_are_refused(values, word):
    with pytest.raises(ShapeInvalid, match=word):
        Shape(**values)


def test_a_flavor_asks_its_aliases_gpus():
    assert flavor_gpus({"pci_passthrough:alias": "h100:2, a100:1"}) == 3
    shape = flavor_shape({"name": "g1.2xh100", "vcpus": 32, "ram": 262144, "extra_specs": {
        "hw:cpu_policy": "dedicated", "pci_passthrough:alias": "h100:2"}})
    assert shape.gpus == 2 and shape.specs()["hw:cpu_policy"] == "dedicated"


def test_hosts_placement_would_not_offer_take_none(hgx):
    """A vGPU flavor on boards without a VGPU inventory: Placement offers no host."""
    shape = Shape(8, 32768, flavor="g.1vgpu", extra_specs=MappingProxyType({
        "hw:cpu_policy": "dedicated", "resources:VGPU": "1"}))
    found = count(SchedulerService(PIPELINES, Fixed(hgx)), hgx, shape, None, NOW)
    assert found.count == 0
    assert str(found.limited_by) == "placement: no VGPU inventory"


def test_like_hosts_are_asked_once_and_named_hosts_apart(hgx):
    from cortex.simulator.capacity import like_hosts

    view = empty_view(hgx)
    hosts = zone_hosts(view, "az-1")
    groups = like_hosts(view, hosts, set())
    assert len(groups) < len(hosts) and sorted(h for g in groups.values() for h in g) == sorted(
        hosts)
    apart = like_hosts(view, hosts, {hosts[0]})
    assert apart[hosts[0]] == [hosts[0]] and len(apart) == len(groups) + 1
