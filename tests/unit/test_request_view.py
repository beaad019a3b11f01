"""The request's view with every overlay applied, and the promise's recount of one host."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import threading
from datetime import UTC, datetime, timedelta
from types import MappingProxyType

from cortex.knowledge.commitments import Commitment, Hold
from cortex.knowledge.reservations import (
    Reservation,
    counted_on,
    recount,
    request_view,
    with_reservations,
)
from cortex.store.reservation_feed import ReservationFeed
from tests.fakes import host, instance, view

NOW = datetime(2026, 11, 28, 12, tzinfo=UTC)
OWNER, OTHER = "a" * 32, "c" * 32


def promise(id_, on, instance_uuid, vcpus=2):
    return Reservation(id_, on, instance_uuid, None, MappingProxyType({"VCPU": vcpus}), (),
                       NOW, NOW + timedelta(minutes=5))


def used(state, rc="VCPU"):
    return next(iter(state.nodes.values())).inventories[rc].used


def committed(on="h2", vcpus=8):
    hold = Hold("k1", "c1", on, MappingProxyType({"VCPU": vcpus}), ())
    return Commitment("c1", OWNER, "az-1", vcpus, 1024, 0, (), 1, NOW - timedelta(days=1),
                      NOW + timedelta(days=1), NOW - timedelta(days=1), None, (hold,))


def test_every_overlay_is_counted_but_the_callers_own_room():
    synced = dataclasses.replace(view(host("h1"), host("h2"), host("h3")),
                                 commitments=(committed(),))
    held = promise("hold", "h3", None, vcpus=4)
    mine, theirs = promise("mine", "h1", "vm-1"), promise("theirs", "h1", "vm-2")
    seen = request_view(synced, [mine, theirs], NOW, "vm-1", OTHER, holds=(held,))
    assert (used(seen.hosts["h1"]), used(seen.hosts["h2"]), used(seen.hosts["h3"])) == (2, 8, 4)
    assert seen.root is synced and seen.overlaid == {"h1", "h2", "h3"}
    owners = request_view(synced, [], NOW, None, OWNER)
    assert owners is synced, "the owner's committed room is its own, nothing laid over"
    assert used(request_view(synced, [], NOW, None, OWNER, commitments=(committed("h1"),))
                .hosts["h1"]) == 0


def test_a_recount_tells_the_counted_reservations_from_new_ones():
    synced = view(host("h1"), host("h2"))
    counted = promise("a", "h1", "vm-2")
    seen = request_view(synced, [counted], NOW, "vm-1", OTHER)
    unchanged = recount(synced, seen, "h1", "vm-1", NOW)
    assert unchanged.same and unchanged.state is seen.hosts["h1"] and unchanged.view is seen
    assert unchanged.expected == {"a"}
    again = recount(synced, seen, "h1", "vm-1", NOW, [counted, promise("mine", "h1", "vm-1")])
    assert again.same, "the caller's own earlier reservation does not count"
    newer = recount(synced, seen, "h1", "vm-1", NOW, [counted, promise("b", "h1", "vm-3")])
    assert not newer.same and used(newer.state) == 4 and newer.view.hosts["h1"] is newer.state
    assert newer.view.hosts["h2"] is seen.hosts["h2"] and newer.expected == {"a", "b"}
    remade = recount(synced, seen, "h1", "vm-1", NOW, [counted], judged=False)
    assert remade.same and remade.state is not seen.hosts["h1"] and used(remade.state) == 2


def test_a_recount_under_the_lock_keeps_the_committed_room_taken():
    """The store holds no commitment hold: a promise's re-read of a host's rows adds the
    holds the view counts there, and expects only the store's rows back."""
    synced = dataclasses.replace(view(host("h1"), host("h2")), commitments=(committed(),))
    for live in ([], filled_feed([])):
        seen = request_view(synced, live, NOW, "vm-1", OTHER)
        assert used(seen.hosts["h2"]) == 8
        unchanged = recount(synced, seen, "h2", "vm-1", NOW, [])
        assert unchanged.same and unchanged.expected == frozenset()
        assert recount(synced, seen, "h2", "vm-1", NOW).expected == frozenset()
        newer = recount(synced, seen, "h2", "vm-1", NOW, [promise("b", "h2", "vm-3")])
        assert not newer.same and used(newer.state) == 10 and newer.expected == {"b"}


def test_an_overlay_made_from_the_last_one_is_the_one_made_whole():
    """Calls on one synced view reuse its last overlay (only the hosts whose reservations
    came or went are recounted); each answer equals the overlay made on a fresh view."""
    rng = random.Random(7)
    names = [f"h{i}" for i in range(12)]
    states = [host(name, instances=[instance("vm-placed")] if name == "h3" else ())
              for name in names]
    synced, live = view(*states), []
    for step in range(300):
        roll = rng.random()
        if roll < 0.5 or not live:
            live.append(promise(f"r{step}", rng.choice([*names, "gone"]),
                                rng.choice([f"vm-{step}", None, "vm-placed"]),
                                rng.randint(1, 3)))
        elif roll < 0.7:
            live.pop(rng.randrange(len(live)))
        elif roll < 0.8:
            live = [dataclasses.replace(r, expires_at=NOW) if rng.random() < 0.1 else r
                    for r in live]
        asking = rng.choice([None, *(r.instance_uuid for r in live[-3:])])
        now = NOW + timedelta(seconds=rng.choice([0, 0, 1]))
        made = with_reservations(synced, list(live), now, asking)
        whole = with_reservations(view(*states), list(live), now, asking)
        assert dict(made.hosts) == dict(whole.hosts), step
        assert (made.overlaid, made.reservations) == (whole.overlaid, whole.reservations)
        assert [counted_on(made, h) for h in names] == [counted_on(whole, h) for h in names]


def filled_feed(items):
    """A feed holding ``items`` as if its listener ran in this process (no database)."""
    feed = ReservationFeed("", lambda: list(items), lambda _: None, clock=lambda: NOW)
    feed._pid, feed._thread = os.getpid(), threading.current_thread()
    feed._reload()
    return feed


def deleted(feed, reservation):
    feed._apply([json.dumps({"op": "delete", "old": reservation.id,
                             "old_expires_at": reservation.expires_at.isoformat(),
                             "row": None})])


def test_an_overlay_updated_from_the_feeds_changes_is_the_one_made_whole():
    """Calls on one synced view update its last overlay from the hosts the feed changed,
    those whose reservations expired between two calls' times and those of the asking
    instances; each answer equals the overlay made from the whole list on a fresh view."""
    rng = random.Random(11)
    names = [f"h{i}" for i in range(12)]
    states = [host(name, instances=[instance("vm-placed")] if name == "h3" else ())
              for name in names]
    synced, step_of = view(*states), {}
    feed = filled_feed([promise("r-first", "h1", "vm-first")])
    for step in range(400):
        roll, live = rng.random(), list(feed.current())
        if roll < 0.5 or not live:
            made = dataclasses.replace(
                promise(f"r{step}", rng.choice([*names, "gone"]),
                        rng.choice([f"vm-{step}", None, "vm-placed", "vm-first"]),
                        rng.randint(1, 3)),
                expires_at=NOW + timedelta(seconds=rng.choice([1, 2, 3, 300])))
            feed.add(made)
        elif roll < 0.8:
            deleted(feed, rng.choice(live))
        live = list(feed.current())
        asking = rng.choice([None, None, *(r.instance_uuid for r in live[-3:])])
        holds = rng.choice([(), (promise("hold", rng.choice(names), None, 4),), (
            promise("hold", "h5", None, 4), dataclasses.replace(
                promise("hold-2", rng.choice(names[:3]), None, 1),
                expires_at=NOW + timedelta(seconds=rng.choice([1, 2, 300]))))])
        now = NOW + timedelta(seconds=rng.choice([0, 1, 2, 3, 2]))
        made = request_view(synced, feed, now, asking, OTHER, holds)
        whole = request_view(view(*states), live, now, asking, OTHER, holds)
        assert dict(made.hosts) == dict(whole.hosts), step
        assert made.overlaid == whole.overlaid, step
        assert sorted(r.id for r in made.reservations) == \
            sorted(r.id for r in whole.reservations), step
        assert [counted_on(made, h) for h in names] == [counted_on(whole, h) for h in names]
        for name in names:
            seen, again = recount(synced, made, name, asking, now), recount(
                whole.root, whole, name, asking, now)
            assert (seen.same, seen.expected) == (again.same, again.expected), (step, name)
        step_of[step] = made
    assert len({id(v.hosts) for v in step_of.values()}) > 1


def test_a_workers_own_promise_counts_at_once_in_the_updated_overlay():
    synced = view(host("h1"), host("h2"))
    feed = filled_feed([promise("a", "h1", "vm-2")])
    first = request_view(synced, feed, NOW, None, OTHER)
    assert used(first.hosts["h1"]) == 2 and used(first.hosts["h2"]) == 0
    feed.add(promise("b", "h2", "vm-3", vcpus=4))
    second = request_view(synced, feed, NOW, None, OTHER)
    assert used(second.hosts["h2"]) == 4 and second.hosts["h1"] is first.hosts["h1"]
    assert counted_on(second, "h2") == {"b"}
    asked = request_view(synced, feed, NOW, "vm-3", OTHER)
    assert used(asked.hosts["h2"]) == 0, "the asking instance's own reservation is left out"
    later = request_view(synced, feed, NOW + timedelta(minutes=6), None, OTHER)
    assert later.hosts["h1"] is synced.hosts["h1"] and list(later.reservations) == []


def test_the_feed_answers_the_hosts_changed_expired_or_asked_since_a_change():
    feed = filled_feed([promise("a", "h1", "vm-1"), dataclasses.replace(
        promise("b", "h2", "vm-2"), expires_at=NOW + timedelta(seconds=2))])
    whole = feed.changes(None, NOW, NOW)
    assert whole.whole and set(whole.on) == {"h1", "h2"}
    assert feed.changes(whole.version, NOW, NOW).on == {}
    feed.add(promise("c", "h3", "vm-3"))
    changed = feed.changes(whole.version, NOW, NOW)
    assert not changed.whole and {h: [r.id for r in v] for h, v in changed.on.items()} == \
        {"h3": ["c"]}
    later, earlier = NOW + timedelta(seconds=3), NOW + timedelta(seconds=1)
    assert set(feed.changes(changed.version, earlier, later).on) == {"h2"}
    assert set(feed.changes(changed.version, later, earlier).on) == {"h2"}, "time went back"
    assert set(feed.changes(changed.version, NOW, earlier).on) == set()
    assert set(feed.changes(changed.version, NOW, NOW, ["vm-1", "vm-9"]).on) == {"h1"}
    deleted(feed, promise("c", "h3", "vm-3"))
    assert feed.changes(changed.version, NOW, NOW).on == {"h3": ()}
    feed._reload()
    assert feed.changes(changed.version, NOW, NOW).whole, "a reload starts callers again"
    mark = feed.changes(None, NOW, NOW).version
    for n in range(2 * 4096 + 1):
        feed.add(promise(f"n{n}", "h4", f"vm-n{n}"))
    assert feed.changes(mark, NOW, NOW).whole, "older than the log kept"
    assert feed.changes(feed.changes(None, NOW, NOW).version, NOW, NOW).on == {}
