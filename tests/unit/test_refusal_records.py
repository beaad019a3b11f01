"""A recorded decision's refusal cause: the step that removed the last hosts, from its steps.

Each call is decided by the shipped pipelines on the ``hgx`` fleet (as
tests/unit/test_refusals.py does for the live counter); the cause the decision log
stores (:attr:`cortex.decision.Decision.refusal`, its row's ``cause``) is the step the
counter starts from.
"""

from dataclasses import replace
from types import MappingProxyType

import pytest

from cortex.conf import shipped_file
from cortex.decision import NO_CANDIDATES, UNKNOWN_HOSTS, Decision, StepResult, refusal_step
from cortex.pipeline.config import load_pipelines
from cortex.request.nova import NovaRequest
from cortex.scheduler.refusals import refusal_cause
from cortex.scheduler.service import SchedulerService, SchedulerSettings
from cortex.simulator.capacity import empty_view, request_body
from cortex.simulator.cloud import SimCloud
from cortex.simulator.fleet import read_fleet
from cortex.simulator.session import resolve_fleet
from tests.unit.test_refusals import SHAPE, Fixed


@pytest.fixture(scope="module")
def view():
    return empty_view(SimCloud(read_fleet(resolve_fleet("hgx"))).view())


def decide(view, hosts, zone=None, **settings):
    """The decision of one live call for :data:`SHAPE` offering ``hosts``."""
    service = SchedulerService(load_pipelines(shipped_file("pipelines.yaml")), Fixed(view),
                               SchedulerSettings(request_time_budget=0, **settings))
    body = request_body(SHAPE, [h for h in hosts if h in view.hosts], view, "vm-1")
    body["hosts"] = [{"host": h, "hypervisor_hostname": h} for h in hosts]
    body["weights"] = dict.fromkeys(hosts, 0.0)
    if zone:
        body["spec"]["nova_object.data"]["availability_zone"] = zone
    return service.schedule(NovaRequest.from_body(body))


def az1(view):
    return sorted(h for h, s in view.hosts.items() if s.availability_zone == "az-1")


def full(view, host):
    """``view`` with every GPU of ``host`` held by a guest."""
    state = view.hosts[host]
    held = replace(state, topology=replace(state.topology, gpus=tuple(
        replace(g, in_use=True) for g in state.topology.gpus)))
    return replace(view, hosts=MappingProxyType({**view.hosts, host: held}))


def test_a_full_board_is_stored_as_refused_by_gpu_capacity(view):
    host = az1(view)[0]
    decision = decide(full(view, host), [host])
    assert decision.result == ()
    assert decision.refusal == "filter_gpu_capacity"
    assert decision.as_row()["cause"] == "filter_gpu_capacity"
    # the counter starts from the same step
    assert refusal_cause(decision.steps, len(decision.hosts)).cause == decision.refusal


def test_another_zone_is_stored_as_refused_by_the_zone_filter(view):
    decision = decide(view, az1(view)[:2], zone="az-2")
    assert decision.refusal == "filter_correct_az"


def test_unknown_hosts_and_no_candidates_have_their_own_causes(view):
    assert decide(view, ["nowhere-1"], unknown_host_policy="drop").refusal == UNKNOWN_HOSTS
    assert refusal_step((), 0) == NO_CANDIDATES
    assert refusal_step((), 3) == UNKNOWN_HOSTS


def test_an_answered_call_has_no_cause(view):
    decision = decide(view, az1(view)[:2])
    assert decision.result and decision.status == 200
    assert decision.refusal is None and decision.as_row()["cause"] is None


def test_rejected_calls_and_shadow_steps_are_not_causes():
    assert Decision("nova", status=400, result=None).refusal is None
    assert Decision("nova", status=503, result=()).refusal is None
    steps = (StepResult("filter_a", "filter", "ran", removed=MappingProxyType({"h1": "x"})),
             StepResult("filter_b", "filter", "ran", shadow=True,
                        removed=MappingProxyType({"h2": "y"})),
             StepResult("filter_c", "filter", "skipped"),
             StepResult("weigher_d", "weigher", "ran"))
    assert Decision("nova", hosts=("h1", "h2"), status=200, result=(),
                    steps=steps).refusal == "filter_a"


def test_a_cause_the_scheduler_named_wins_over_the_steps_and_reads_back():
    steps = (StepResult("filter_has_enough_capacity", "filter", "ran",
                        removed=MappingProxyType({"h1": "MEMORY_MB: used 8 + 8 > capacity 10"})),)
    named = Decision("nova", hosts=("h1",), status=200, result=(), steps=steps,
                     cause="reservations")
    assert named.refusal == "reservations" and named.as_row()["cause"] == "reservations"
    assert Decision("nova", hosts=("h1",), status=200, result=("h1",),
                    cause="reservations").refusal is None, "an answered call has none"
    row = named.as_row()
    back = Decision.from_record(row["record"], cause=row["cause"])
    assert back.refusal == "reservations"
    assert Decision.from_record(row["record"]).refusal == "filter_has_enough_capacity"

