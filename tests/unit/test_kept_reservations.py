"""Which in-flight reservations still count against the synced view (``pending``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import MappingProxyType

import pytest

from cortex.knowledge.reservations import Reservation, pending
from tests.fakes import host, instance, view

NOW = datetime(2026, 11, 28, tzinfo=UTC)


def promise(id_, on, instance_uuid, expires=timedelta(minutes=5)):
    return Reservation(id_, on, instance_uuid, None, MappingProxyType({"VCPU": 2}), (),
                       NOW, NOW + expires)


@pytest.mark.parametrize(("shown_on", "task_state", "counts"), [
    (None, None, True),                 # not synced yet: the promise holds the room
    ("h1", None, False),                # on the promised host: Placement holds it
    ("h1", "spawning", False),          # building there: Placement holds it already
    ("h2", None, False),                # placed on an alternate: the promise is void
    ("h2", "migrating", True),          # live migrating from h2 to h1
    ("h2", "resize_migrating", True),   # resize or cold migration under way
    ("h2", "rebuilding", True),         # evacuation: rebuilt on h1 from a dead h2
])
def test_a_promise_counts_until_the_view_shows_its_instance_placed(shown_on, task_state,
                                                                   counts):
    on = {name: [] for name in ("h1", "h2")}
    if shown_on:
        on[shown_on].append(instance("vm-1", task_state=task_state))
    synced = view(*(host(name, instances=instances) for name, instances in on.items()))
    reservation = promise("r", "h1", "vm-1")
    assert pending([reservation], synced, NOW) == ([reservation] if counts else [])


def test_expired_promises_and_promises_without_an_instance():
    synced = view(host("h1"))
    slot, old = promise("slot", "h1", None), promise("old", "h1", "vm-9", timedelta(0))
    assert pending([slot, old], synced, NOW) == [slot]
