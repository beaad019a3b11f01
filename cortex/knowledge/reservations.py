"""In-flight reservations: what Cortex just promised, counted until Placement shows it.

Between Cortex's answer and the synced Placement usage showing the claim there is a
window (nova-scheduler claims, then cortex-sync reads it back, up to a sync interval
later) in which concurrent calls would see the same free capacity. Each answer therefore
records a short-lived :class:`Reservation` (host, resources, GPUs predicted, group id);
:func:`with_reservations` lays the active ones over a knowledge view so that every
capacity filter, the GPU filters and the network domain choice count them. A
reservation stops counting as soon as the synced view shows its instance on the
reservation's host, or on another host and not moving (Nova placed it, elsewhere
perhaps, and Placement's usage includes it); a move's reservation counts while the view
still shows the instance moving on its source. The nova sync deletes a reservation it
no longer counts (:func:`kept`); the rest are deleted when their TTL passes, and until
then still tell the group's later calls where their siblings went.

It is also where a request's every overlay is laid: :func:`request_view` is the view
one Nova request is judged on, with other projects' committed room (the free holds of
:mod:`cortex.knowledge.commitments`, :func:`counted_holds`), the in-flight reservations
and the caller's own holds counted; :func:`recount` is the promise's one question about
a host under its lock, and :func:`relaid` lays a group's planned members over a view.

This module is pure; :mod:`cortex.store.reservations` keeps them in the database,
:mod:`cortex.store.memory` in process (the simulator, one-process tests).
"""

from __future__ import annotations

import dataclasses
from collections import ChainMap
from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from cortex.knowledge.view import HostState, KnowledgeView


@dataclass(frozen=True, slots=True)
class Reservation:
    """One promise: ``resources`` (class -> amount) and ``gpus`` (PCI addresses) on ``host``.

    ``instance_uuid`` is the instance Nova asked for (None when the spec names none);
    ``group_id`` ties the calls of one multi-create or server group together; times are
    timezone-aware UTC.
    """

    id: str
    host: str
    instance_uuid: str | None
    group_id: str | None
    resources: Mapping[str, int]
    gpus: tuple[str, ...]
    created_at: datetime
    expires_at: datetime


#: Nova's task states of an instance on its way to another host (resize and cold
#: migration, live migration, evacuation and rebuild): ``nova.compute.task_states``.
MOVING_TASK_STATES = frozenset({
    "resize_prep", "resize_migrating", "resize_migrated", "resize_finish",
    "migrating", "rebuilding", "rebuild_block_device_mapping", "rebuild_spawning"})


def kept(host: str, placed_on: str | None, task_state: str | None) -> bool:
    """Whether a reservation on ``host`` is kept: its instance shows on ``placed_on``.

    Kept when the instance is on the reservation's host, or on another host and not
    moving (a create Nova placed on an alternate); not when it is absent (``None``) or
    still moving on its source (``task_state`` in :data:`MOVING_TASK_STATES`).
    """
    if placed_on is None:
        return False
    return placed_on == host or task_state not in MOVING_TASK_STATES


def placed_instances(view: KnowledgeView) -> Mapping[str, tuple[str, str | None]]:
    """``{instance uuid: (host, task_state)}`` of the instances the synced view shows.

    Read from the synced view under the overlays (``view.base``), once per knowledge
    version: every Nova call asks, and the walk over all hosts' instances costs O(hosts).
    """
    return view.root.derived(("placed-instances",), lambda synced: MappingProxyType({
        i.uuid: (host, i.task_state)
        for host, state in synced.hosts.items() for i in state.instances}))


def pending(reservations: Iterable[Reservation], view: KnowledgeView,
            now: datetime) -> list[Reservation]:
    """The reservations that still count: not expired and not :func:`kept` by the view."""
    placed = placed_instances(view)
    return [r for r in reservations if r.expires_at > now and (
        r.instance_uuid is None
        or not kept(r.host, *placed.get(r.instance_uuid, (None, None))))]


def others_on(reservations: Iterable[Reservation], host: str,
              own: str | None) -> list[Reservation]:
    """The reservations on ``host`` other than instance ``own``'s (a new answer replaces it).

    ``own`` None: every one of the host's, those without an instance included.
    """
    return [r for r in reservations if r.host == host and not (own and r.instance_uuid == own)]


def reserve_host(state: HostState, reservations: Iterable[Reservation]) -> HostState:
    """``state`` with the reservations' resources added to ``used`` and their GPUs in use.

    Resources go on the host's first node that has an inventory of the class (Nova
    hosts with one node; a multi-node host's reservations are rare and counted once).
    """
    claimed: dict[str, int] = {}
    gpus: set[str] = set()
    for reservation in reservations:
        for rc, amount in reservation.resources.items():
            claimed[rc] = claimed.get(rc, 0) + amount
        gpus.update(reservation.gpus)
    nodes = dict(state.nodes)
    for rc, amount in claimed.items():
        node = next((n for n in nodes.values() if rc in n.inventories), None)
        if node is None:
            continue
        inventories = dict(node.inventories)
        inventories[rc] = dataclasses.replace(inventories[rc], used=inventories[rc].used + amount)
        nodes[node.node] = dataclasses.replace(node, inventories=MappingProxyType(inventories))
    topology = state.topology
    if topology is not None and gpus:
        topology = dataclasses.replace(topology, gpus=tuple(
            dataclasses.replace(g, in_use=True, in_use_source="reservation")
            if g.pci_address in gpus and not g.in_use else g for g in topology.gpus))
    return dataclasses.replace(state, nodes=MappingProxyType(nodes), topology=topology)


def _reserved_states(view: KnowledgeView) -> dict[str, tuple[HostState, frozenset[str],
                                                           HostState]]:
    """Per host: ``(synced state, reservation ids, state with them)``.

    Kept in the synced view of ``view``: :func:`with_reservations` fills it,
    :func:`counted_on` reads it.
    """
    return view.root.derived(("reserved-host-states",), lambda _: {})


def counted_on(view: KnowledgeView, host: str) -> frozenset[str] | None:
    """Ids of the reservations ``view`` counts in ``host``'s state; None when it cannot tell.

    ``view`` is a synced view or one :func:`with_reservations` made of it: a host it did
    not change counts none, a host it changed counts those of its kept reserved state,
    when the view holds that very state object. The promise's re-check under the host's
    lock (:mod:`cortex.scheduler.promise`) compares them with the reservations it reads
    there: the same ones mean the same state, already judged by the pipeline.
    """
    if host not in view.overlaid:
        return frozenset()
    kept = _reserved_states(view).get(host)
    if kept is not None and view.hosts.get(host) is kept[2]:
        return kept[1]
    return None


def with_reservations(view: KnowledgeView, reservations: Iterable[Reservation],
                      now: datetime, instance_uuid: str | None = None) -> KnowledgeView:
    """A view in which the pending reservations are used capacity; the view itself if none.

    The returned view's ``reservations`` holds every unexpired reservation (also those
    already reflected), so group placement still sees where the siblings went. A
    reservation of ``instance_uuid`` (Nova asking again for the same instance) is left
    out: the new answer replaces it.

    A host's state with its reservations counted is kept in the synced ``view`` and
    answered again, the same object, while the host's pending reservations are the
    same ones: every create adds one reservation, and rebuilding the state of every
    host that has one on every call cost ~40 µs per such host, and made the plugins'
    per-host facts (``KnowledgeView.per_host``, kept per state object) miss for all.
    On a synced view the overlay is made from the last one made on it
    (:func:`_laid_again`): only the hosts whose reservations came or went are looked
    at again, so a call's overlay costs what changed since the last call, not what
    is live.
    """
    live = [r for r in reservations if _counts(r, now, instance_uuid)]
    if not live:
        return view
    laid = _laid_again(view, live, now) if view.base is None else _laid(view, live, now, {})
    return dataclasses.replace(view, hosts=laid.hosts, reservations=tuple(live), base=view,
                               overlaid=view.overlaid | laid.changed)


@dataclass(frozen=True, slots=True)
class _Laid:
    """An overlay of ``live`` on a view: the host map with them, the hosts they changed.

    ``on``: per host, the pending reservations counted there; ``keys``: the ``id()`` of
    each of ``live``, which the overlay holds, so that no other object takes one of
    them while it is kept.
    """

    live: tuple[Reservation, ...]
    keys: frozenset[int]
    hosts: Mapping[str, HostState]
    changed: frozenset[str]
    on: MappingProxyType[str, tuple[Reservation, ...]]


def _laid(view: KnowledgeView, live: list[Reservation], now: datetime,
          on: dict[str, list[Reservation]], base: _Laid | None = None) -> _Laid:
    """The overlay of ``live`` on ``view``; only ``on``'s hosts recounted when ``base`` is given.

    ``on``: per host, the pending reservations to count there (filled here from
    ``live`` when ``base`` is None); ``base``: the overlay these hosts change (its other
    hosts are kept as they are).
    """
    if base is None:
        for reservation in pending(live, view, now):
            if reservation.host in view.hosts:
                on.setdefault(reservation.host, []).append(reservation)
    counted: dict[str, tuple[Reservation, ...]] = {} if base is None else base.on.copy()
    changed: dict[str, HostState] = {}
    kept = _reserved_states(view)
    for host, items in on.items():
        if not items:
            counted.pop(host, None)
            continue
        counted[host] = tuple(items)
        state, ids = view.hosts[host], frozenset(r.id for r in items)
        known = kept.get(host)  # (synced state, reservation ids, state with them)
        if known is None or known[0] is not state or known[1] != ids:
            known = kept[host] = (state, ids, reserve_host(state, items))
        changed[host] = known[2]
    # one copy of the host map, made by the dict itself: dict() of a mappingproxy goes
    # key by key (0.9 ms at 10,000 hosts, 0.03 ms this way)
    source = view.hosts if base is None else base.hosts
    merged = (source.copy() if isinstance(source, dict | MappingProxyType) else dict(source))
    merged.update(changed)
    for host in on.keys() - counted.keys():
        merged[host] = view.hosts[host]
    hosts = MappingProxyType(merged) if counted else view.hosts
    # the hosts counted on: the last overlay's set while no host came or went
    same = base is not None and len(counted) == len(base.on) and all(
        host in base.on for host in on if host in counted)
    return _Laid(tuple(live), frozenset(map(id, live)), hosts,
                 base.changed if same else frozenset(counted),  # type: ignore[union-attr]
                 MappingProxyType(counted))


def _laid_again(view: KnowledgeView, live: list[Reservation], now: datetime) -> _Laid:
    """The overlay of ``live`` on the synced ``view``, made from the last one made on it.

    The last one is answered again when its reservations are the very same objects;
    else only the hosts of the reservations that came or went are recounted (a
    reservation's pending or not is the synced view's to say, so the others stand).
    The whole overlay is made when there is no last one or most of them changed (a
    store that reads them afresh on every call hands new objects). What is made is
    kept for the next call; two calls at once may both make one, the last kept.
    """
    box: list[_Laid | None] = view.derived(("reservation-overlay",), lambda _: [None])
    last = box[0]
    keys = frozenset(map(id, live))
    if last is not None and last.keys == keys and len(keys) == len(live):
        return last
    if last is None or len(keys) != len(live) or len(keys - last.keys) * 2 > len(keys):
        laid = _laid(view, live, now, {})
    else:
        came = [r for r in live if id(r) not in last.keys]
        hosts = {r.host for r in came} | {r.host for r in last.live if id(r) not in keys}
        on: dict[str, list[Reservation]] = {h: [] for h in hosts if h in view.hosts}
        for reservation in pending([r for r in live if r.host in on], view, now):
            on[reservation.host].append(reservation)
        laid = _laid(view, live, now, on, last)
    box[0] = laid
    return laid


@dataclass(frozen=True, slots=True)
class Changes:
    """What changed in a :class:`LiveReservations` since a caller last looked.

    ``version``: the source's change count now; ``whole``: ``on`` holds every host
    that has reservations (the caller starts again), else only the hosts to look at
    again; ``on``: per such host, all its reservations now (empty: none left; expired
    ones may be among them).
    """

    version: int
    whole: bool
    on: Mapping[str, tuple[Reservation, ...]]


@runtime_checkable
class LiveReservations(Protocol):
    """The live reservations as a change count and the changes since one.

    :class:`cortex.store.reservation_feed.ReservationFeed` is one: :func:`request_view`
    then updates its last overlay from the hosts that changed instead of the whole list.
    """

    def changes(self, since: int | None, start: datetime, end: datetime,
                instances: Iterable[str] = ()) -> Changes | None:
        """The hosts to look at again since change ``since`` (None: all hosts).

        With those of a reservation expiring between ``start`` and ``end`` and those of
        ``instances``' reservations; None when the source cannot tell (it does not listen).
        """


def _counts(reservation: Reservation, now: datetime, own: str | None) -> bool:
    """Whether ``reservation`` counts at ``now`` for a call of instance ``own``."""
    return reservation.expires_at > now and not (own and reservation.instance_uuid == own)


def _extra_ids(extras: Iterable[Reservation], now: datetime,
               own: str | None) -> dict[str, frozenset[str]]:
    """``{host: ids of the extras that count there}``: what a host's overlay was made with."""
    found: dict[str, set[str]] = {}
    for reservation in extras:
        if _counts(reservation, now, own):
            found.setdefault(reservation.host, set()).add(reservation.id)
    return {host: frozenset(ids) for host, ids in found.items()}


class _Listed(Sequence[Reservation]):
    """A request view's reservations, listed when first read: ``extras`` then the hosts'.

    Those expired at ``now`` and those of instance ``own`` are left out. :meth:`on`
    answers one host's without listing them all (the promise's recount).
    """

    def __init__(self, extras: tuple[Reservation, ...],
                 on: Mapping[str, tuple[Reservation, ...]], now: datetime,
                 own: str | None) -> None:
        self._extras, self._on, self._now, self._own = extras, on, now, own
        self._all: tuple[Reservation, ...] | None = None
        self._extras_on: dict[str, list[Reservation]] = {}
        for reservation in extras:
            self._extras_on.setdefault(reservation.host, []).append(reservation)

    def _counts(self, reservation: Reservation) -> bool:
        return _counts(reservation, self._now, self._own)

    def on(self, host: str) -> list[Reservation]:
        """The reservations listed on ``host``."""
        return [r for r in (*self._extras_on.get(host, ()), *self._on.get(host, ()))
                if self._counts(r)]

    def holds_on(self, hosts: Container[str] | None) -> list[Reservation]:
        """The commitments' holds listed on ``hosts`` (None: every host): :func:`holds_on`."""
        return [r for r in self._extras if is_hold(r) and (hosts is None or r.host in hosts)
                and self._counts(r)]

    def _listed(self) -> tuple[Reservation, ...]:
        if self._all is None:
            self._all = tuple(r for r in (*self._extras, *(r for items in self._on.values()
                                                          for r in items))
                              if self._counts(r))
        return self._all

    def __getitem__(self, index: Any) -> Any:
        return self._listed()[index]

    def __len__(self) -> int:
        return len(self._listed())

    def __iter__(self) -> Iterator[Reservation]:
        return iter(self._listed())

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, Sequence) else other)

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True, slots=True)
class _Fed:
    """The last overlay made on a synced view from a :class:`LiveReservations`.

    ``version``, ``now``, ``own``: the source's change count, the time and the asking
    instance it was made with; ``extras``: the ids of the other reservations counted,
    per host (:func:`_extra_ids`); ``on``: every host's reservations from the source at
    that count.
    """

    source: LiveReservations
    version: int
    now: datetime
    own: str | None
    extras: Mapping[str, frozenset[str]]
    on: Mapping[str, tuple[Reservation, ...]]
    laid: _Laid


def _fed(view: KnowledgeView, source: LiveReservations, extras: tuple[Reservation, ...],
         now: datetime, own: str | None) -> KnowledgeView:
    """``view`` (synced) with ``extras`` and ``source``'s live reservations counted.

    Made from the last such overlay on ``view``: only the hosts the source changed since,
    those of a reservation that expired (or came back to life) between the two calls'
    times, those of this and the last call's asking instance and those where the
    ``extras`` counted differ from the last call's are looked at again, so the call
    costs what changed, not what is live. The last one is kept for the next call; two
    calls at once may both make one, the last kept. A source that stopped listening
    since the store handed it counts none.
    """
    box: list[_Fed | None] = view.derived(("reservation-source-overlay",), lambda _: [None])
    last = box[0]
    if last is not None and last.source is not source:
        last = None
    asked = {i for i in (own, last and last.own) if i}
    changes = source.changes(None if last is None else last.version,
                             now if last is None else last.now, now, asked)
    if changes is None:
        return with_reservations(view, extras, now, own)
    counted = _extra_ids(extras, now, own)
    if last is None or changes.whole:
        on: Mapping[str, tuple[Reservation, ...]] = MappingProxyType(dict(changes.on))
        touched, base = set(on) | counted.keys(), None
    else:
        on, touched, base = last.on, set(changes.on), last.laid
        if changes.on:
            merged = last.on.copy()  # type: ignore[attr-defined]  # a mappingproxy: at C speed
            for host, items in changes.on.items():
                if items:
                    merged[host] = items
                else:
                    merged.pop(host, None)
            on = MappingProxyType(merged)
        touched.update(h for h in counted.keys() | last.extras.keys()
                       if counted.get(h) != last.extras.get(h))
    recounted: dict[str, list[Reservation]] = {h: [] for h in touched if h in view.hosts}
    listed = _Listed(extras, on, now, own)
    for host in recounted:
        for reservation in pending(listed.on(host), view, now):
            recounted[host].append(reservation)
    if recounted:
        laid = _laid(view, [], now, recounted, base)
    else:  # nothing to recount: the last overlay as it is
        laid = base or _Laid((), frozenset(), view.hosts, frozenset(), MappingProxyType({}))
    box[0] = _Fed(source, changes.version, now, own, counted, on, laid)
    if not on and not extras:
        return view
    return dataclasses.replace(view, hosts=laid.hosts, reservations=listed,  # type: ignore[arg-type]
                               base=view, overlaid=view.overlaid | laid.changed
                               if view.overlaid else laid.changed)


def free_holds(commitment: Any, hosts: Mapping[str, object]) -> list[Any]:
    """The holds of ``commitment`` its owner's instances have not consumed yet.

    ``commitment``: a :class:`cortex.knowledge.commitments.Commitment`; ``hosts``: the
    synced view's host states (their ``instances`` with project ids). A hold bound to
    an instance is consumed; per host, each owner instance beyond the free holds'
    ``baseline`` and not bound to a hold consumes one more.
    """
    bound = {h.instance_uuid for h in commitment.holds if h.instance_uuid}
    by_host: dict[str, list[Any]] = {}
    for hold in commitment.holds:
        if not hold.instance_uuid:
            by_host.setdefault(hold.host, []).append(hold)
    free = []
    for host, holds in by_host.items():
        state = hosts.get(host)
        owned = sum(1 for i in getattr(state, "instances", ())
                    if i.project_id == commitment.project_id and i.uuid not in bound)
        consumed = min(len(holds), max(0, owned - max(h.baseline for h in holds)))
        free.extend(holds[consumed:])
    return free


#: The id prefix of a commitment's hold laid over a view as a reservation
#: (:func:`as_reservation`); the reservation store's rows have UUIDs.
HOLD_PREFIX = "hold-"


def as_reservation(hold: Any, created_at: datetime, expires_at: datetime) -> Reservation:
    """A commitment's ``hold`` as a reservation of no instance (counted until ``expires_at``)."""
    return Reservation(f"{HOLD_PREFIX}{hold.id}", hold.host, None, None, hold.resources,
                       hold.gpus, created_at, expires_at)


def is_hold(reservation: Reservation) -> bool:
    """Whether ``reservation`` is a commitment's hold, not a row of the reservation store."""
    return reservation.id.startswith(HOLD_PREFIX)


def holds_on(view: KnowledgeView, hosts: Container[str] | None = None) -> list[Reservation]:
    """The commitments' holds ``view`` counts on ``hosts`` (None: on every host).

    What a read of the reservation store leaves out: a promise that reads a host's rows
    under its lock adds these to them, so committed room stays taken in its re-check.
    """
    listed = view.reservations
    if isinstance(listed, _Listed):
        return listed.holds_on(hosts)
    return [r for r in listed if is_hold(r) and (hosts is None or r.host in hosts)]


def counted_holds(commitments: Iterable[Any], hosts: Mapping[str, object],
                  project_id: str | None, now: datetime) -> list[Reservation]:
    """The free holds of active commitments of other projects, as reservations.

    Laid over a view as in-flight reservations are (:func:`request_view`); each expires
    with its commitment and names no instance (it stays counted).
    """
    return [as_reservation(h, c.created_at, c.end_at)
            for c in commitments if c.active(now) and c.project_id != project_id
            for h in free_holds(c, hosts)]


def _view_holds(view: KnowledgeView) -> tuple[tuple[Any, tuple[Reservation, ...]], ...]:
    """Each of ``view``'s commitments with its free holds as reservations, once per view."""
    return view.derived(("commitment-free-holds",), lambda v: tuple(
        (c, tuple(as_reservation(h, c.created_at, c.end_at) for h in free_holds(c, v.hosts)))
        for c in v.commitments))


def request_view(view: KnowledgeView, in_flight: Iterable[Reservation] | LiveReservations,
                 now: datetime,
                 instance_uuid: str | None, project_id: str | None,
                 holds: Iterable[Reservation] = (),
                 commitments: Iterable[Any] | None = None) -> KnowledgeView:
    """The view one Nova request is judged on: every overlay laid over the synced ``view``.

    Counted as used capacity (:func:`with_reservations`): ``holds`` (room the caller
    counts as taken: a commitment's instances placed so far while it is placed), the
    free holds of other projects' active commitments (``commitments``, the view's when
    None: :func:`counted_holds`), and the ``in_flight`` reservations, but not those of
    ``instance_uuid`` (its new answer replaces them). ``view`` itself when nothing is
    laid over it. ``project_id``: the request's project, whose own committed room stays
    free for it. ``in_flight`` a :class:`LiveReservations` (the feed's): the overlay is
    updated from the hosts that changed since the last call on ``view`` (:func:`_fed`).
    """
    if commitments is None:  # the view's own: their free holds depend on the view alone
        extras = [*holds, *(r for c, made in _view_holds(view)
                            if c.active(now) and c.project_id != project_id for r in made)]
    else:
        extras = [*holds, *counted_holds(commitments, view.hosts, project_id, now)]
    if hasattr(in_flight, "changes"):  # a LiveReservations (isinstance on the protocol
        # costs most of a call's overlay when nothing changed)
        if view.base is None:
            return _fed(view, in_flight, tuple(extras), now, instance_uuid)
        found = in_flight.changes(None, now, now)  # an overlaid view: its whole list
        in_flight = [r for items in (found.on.values() if found else ()) for r in items]
    active = [*extras, *in_flight]  # type: ignore[misc]
    if not active:
        return view
    return with_reservations(view, active, now, instance_uuid)


@dataclass(frozen=True, slots=True)
class Recount:
    """One host of a request's view recounted with the reservations found on it.

    ``same``: the pending ones are those the view counted on the host. ``state``: the
    state the pipeline judged (``view`` the request's view itself) when the same, else
    the pending ones counted over the synced state (``view``: the request's view with
    that one state laid over it); both None when no reservations were given and the
    view's own did not match. ``expected``: the ids of the store's reservations listed
    on the host (the request's own and the commitments' holds left out).
    """

    same: bool
    state: HostState | None
    view: KnowledgeView | None
    expected: frozenset[str]


def recount(base: KnowledgeView, overlaid: KnowledgeView, host: str, own: str | None,
            now: datetime, current: Iterable[Reservation] | None = None,
            judged: bool = True) -> Recount:
    """``host`` of ``overlaid`` recounted with ``current`` (None: ``overlaid``'s own list).

    ``base``: the synced view ``overlaid`` was made of (:func:`request_view`); ``own``:
    the request's instance, whose reservation does not count; ``current``: the
    reservations a promise read under the host's lock. The promise's one question to
    the overlay (:mod:`cortex.scheduler.promise`): are they the ones the pipeline
    counted (:func:`counted_on`), and if not, what is the host's state with them.
    ``judged``: the same ones may be answered with the view's own state (False: the
    state is made again from ``current`` all the same).
    """
    if current is None and isinstance(overlaid.reservations, _Listed):
        listed = others_on(overlaid.reservations.on(host), host, own)
    elif current is None:
        listed = others_on(overlaid.reservations, host, own)
    else:  # the store's rows, and the holds the view counts there (the store has none)
        listed = others_on([*current, *holds_on(overlaid, (host,))], host, own)
    others = pending(listed, base, now)
    counted = counted_on(overlaid, host)
    expected = frozenset(r.id for r in listed if not is_hold(r))
    same = counted is not None and counted == frozenset(r.id for r in others)
    if same and judged:
        return Recount(True, overlaid.hosts[host], overlaid, expected)
    if current is None:
        return Recount(same, None, None, expected)
    state = reserve_host(base.hosts[host], others)
    # the one host laid over the request's view, not copying every other host's entry
    view = dataclasses.replace(overlaid, hosts=MappingProxyType(
        ChainMap({host: state}, overlaid.hosts)),  # type: ignore[arg-type]  # only read
        base=overlaid, overlaid=overlaid.overlaid | {host})
    return Recount(same, state, view, expected)


def relaid(overlaid: KnowledgeView, base: KnowledgeView, listed: Iterable[Reservation],
           hosts: Iterable[str], own: str | None, now: datetime,
           members: Iterable[Reservation] = ()) -> KnowledgeView:
    """``overlaid`` with ``hosts`` recounted from ``listed`` and a group's ``members``.

    Each host's state: its synced state (``base``) with the pending ones of ``listed``
    (other than ``own``'s) and the ``members`` planned on it; the view lists ``listed``
    and ``members``. A group's plan (:mod:`cortex.scheduler.promise`) lays its members
    over the request's view so, and a later member's slot is left out so.
    """
    listed, members = list(listed), list(members)
    changed = {}
    for host in hosts:
        counted = pending(others_on(listed, host, own), base, now)
        changed[host] = reserve_host(base.hosts[host], [*counted, *(m for m in members
                                                                     if m.host == host)])
    return dataclasses.replace(
        overlaid, hosts=MappingProxyType(ChainMap(changed, overlaid.hosts)),  # type: ignore[arg-type]
        reservations=(*listed, *members), base=overlaid,
        overlaid=overlaid.overlaid | changed.keys())
