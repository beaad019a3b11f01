"""cortex_scheduler_no_valid_host_total: a live call answered with no host, by its cause.

Each call offers the shipped GPU pipeline the hosts one kind of step removes last: a
full board (filter_gpu_capacity), another zone (filter_correct_az), the failover room
(filter_failover_room), a board another project's commitment holds (commitments), a
board an in-flight reservation holds (reservations), hosts Cortex does not know
(unknown_hosts).
"""

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from types import MappingProxyType

import pytest
from prometheus_client import CollectorRegistry

from cortex.conf import shipped_file
from cortex.knowledge.commitments import Commitment
from cortex.knowledge.reservations import Reservation
from cortex.pipeline.config import load_pipelines
from cortex.request.nova import NovaRequest
from cortex.scheduler.metrics import SchedulerMetrics
from cortex.scheduler.service import SchedulerService, SchedulerSettings
from cortex.simulator.capacity import Shape, empty_view, request_body
from cortex.simulator.cloud import SimCloud
from cortex.simulator.commitments import place
from cortex.simulator.fleet import read_fleet
from cortex.simulator.session import resolve_fleet

PIPELINE = "kvm-gpu-topology-aware"
SHAPE = Shape(64, 262144, 8, project_id="someone")


class Fixed:
    def __init__(self, view):
        self._view = view

    def view(self):
        return self._view


class HeldBoards:
    """A reservation store whose in-flight reservations hold every GPU of ``host``."""

    def __init__(self, view, host):
        now = datetime.now(UTC)
        gpus = tuple(g.pci_address for g in view.hosts[host].topology.gpus)
        self.held = [Reservation("r1", host, "vm-in-flight", None, MappingProxyType({}), gpus,
                                 now, now + timedelta(hours=1))]

    def active(self, now):
        return self.held


@pytest.fixture(scope="module")
def view():
    return empty_view(SimCloud(read_fleet(resolve_fleet("hgx"))).view())


@pytest.fixture(scope="module")
def failover_pipelines(tmp_path_factory):
    text = shipped_file("pipelines.yaml").read_text()
    path = tmp_path_factory.mktemp("pipelines") / "pipelines.yaml"
    path.write_text(text.replace("options: {hosts: 0, group_by: gpu_model}",
                                 "options: {hosts: 1, group_by: gpu_model}"))
    return load_pipelines(path)


def refused(view, hosts, pipelines=None, reservations=None, zone=None, **settings):
    """The no-valid-host counts by cause after one live call offering ``hosts``."""
    registry = CollectorRegistry()
    service = SchedulerService(
        pipelines or load_pipelines(shipped_file("pipelines.yaml")), Fixed(view),
        SchedulerSettings(request_time_budget=0, **settings), reservations,
        metrics=SchedulerMetrics(registry))
    body = request_body(SHAPE, [h for h in hosts if h in view.hosts], view, "vm-1")
    body["hosts"] = [{"host": h, "hypervisor_hostname": h} for h in hosts]
    body["weights"] = dict.fromkeys(hosts, 0.0)
    if zone:
        body["spec"]["nova_object.data"]["availability_zone"] = zone
    decision = service.schedule(NovaRequest.from_body(body))
    assert decision.result == ()
    return {s.labels["cause"]: s.value for metric in registry.collect()
            if metric.name == "cortex_scheduler_no_valid_host" for s in metric.samples
            if s.name.endswith("_total") and s.labels["pipeline"] in (PIPELINE, "none")}


def az1(view):
    return sorted(h for h, s in view.hosts.items() if s.availability_zone == "az-1")


def test_a_full_board_is_refused_for_gpu_capacity(view):
    host = az1(view)[0]
    state = view.hosts[host]
    full = replace(state, topology=replace(state.topology, gpus=tuple(
        replace(g, in_use=True) for g in state.topology.gpus)))
    filled = replace(view, hosts=MappingProxyType({**view.hosts, host: full}))
    assert refused(filled, [host]) == {"filter_gpu_capacity": 1}


def test_another_zone_is_refused_for_the_zone(view):
    assert refused(view, az1(view)[:2], zone="az-2") == {"filter_correct_az": 1}


def test_the_failover_room_is_refused_by_its_own_step(view, failover_pipelines):
    hosts = az1(view)
    assert refused(view, hosts[:1], failover_pipelines) == {"filter_failover_room": 1}
    # with a host it does not keep offered too, the call is answered
    with pytest.raises(AssertionError):
        refused(view, hosts[:2], failover_pipelines)


def test_a_board_another_project_committed_is_refused_for_commitments(view):
    now = datetime.now(UTC)
    service = SchedulerService(load_pipelines(shipped_file("pipelines.yaml")), Fixed(view))
    spec = Commitment("", "owner", "az-1", 64, 262144, 8, (), 1, now - timedelta(hours=1),
                      now + timedelta(days=1), now)
    made = place(service, spec, now)
    (hold,) = made.holds
    assert refused(replace(view, commitments=(made,)), [hold.host]) == {"commitments": 1}


def test_a_board_held_in_flight_is_refused_for_reservations(view):
    host = az1(view)[0]
    assert refused(view, [host], reservations=HeldBoards(view, host)) == {"reservations": 1}


def test_hosts_cortex_does_not_know_are_refused_as_unknown(view):
    assert refused(view, ["nowhere-1", "nowhere-2"],
                   unknown_host_policy="drop") == {"unknown_hosts": 1}
