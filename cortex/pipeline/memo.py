"""Step answers kept per knowledge version, so that a repeated request shape costs lookups.

Nova asks again and again for the same few flavors: every instance of a multi-create,
every retry with alternates, every build of a popular GPU flavor. A plugin whose answer
for a host depends only on the host's state, its own options and a small part of the
request declares that part as its ``memo_key`` (:meth:`cortex.plugins.base.Plugin.memo_key`).
The engine then keeps each host's answer per step and key in the synced view it was
computed on (:meth:`cortex.knowledge.view.KnowledgeView.derived`, so the answers go
with the view when the knowledge version moves), and a later request with the same key
asks the plugin only about the hosts it has not judged yet. Hosts with several nodes
(the nodes the caller names may change the answer) are always asked.

A host whose state the request's view changed (in-flight reservations,
``KnowledgeView.overlaid``) has its answer kept apart, with the state object it was
judged on, and used again only while the view holds that very object
(:func:`cortex.knowledge.reservations.with_reservations` keeps a host's reserved state
while its reservations stay the same). A busy cloud has a reservation in flight on
thousands of hosts; asking about each of them on every call cost ~35 µs per such host.

The lookups are set and dict operations over host names, done in C: a step whose
answers are all known costs tens of microseconds for a thousand candidates, where the
plugins' own batch methods cost up to milliseconds (the GPU and NUMA rules).

The store is bounded: at most ``limit`` host answers per view, the tables least
recently used dropped first. Each drop is reported to the store's ``on_drop`` (the API
counts them in ``cortex_step_answers_dropped_total``): answers dropped steadily mean the
limit is too small for the request shapes the cloud asks, and their steps are asked
again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from cortex.knowledge.view import KnowledgeView

#: Host answers kept per synced view by default (about 100 bytes each).
DEFAULT_LIMIT = 200_000


class AnswerTable:
    """One step's answers under one request key: ``known`` hosts, ``answers`` by host.

    A filter's table holds only the reasons of the hosts that fail (a known host
    without an answer passes); a weigher's holds every known host's raw weight. Both
    are answers on the synced states. ``reserved`` holds, per host, the answer on a
    state an overlay made: ``(that state, answer)``, the answer None for a filter's pass.
    """

    __slots__ = ("known", "answers", "reserved", "store", "key", "counted")

    def __init__(self, store: AnswerStore, key: Hashable = None) -> None:
        self.known: set[str] = set()
        self.answers: dict[str, Any] = {}
        self.reserved: dict[str, tuple[Any, Any]] = {}
        self.store = store
        self.key = key
        self.counted = 0  # host answers the store has counted for this table

    def __len__(self) -> int:
        """Host answers held, synced and reserved."""
        return len(self.known) + len(self.reserved)


class AnswerStore:
    """The answer tables of one synced view, least recently used first; thread-safe.

    ``limit``: host answers held at most; ``on_drop(answers)`` is called (outside the
    store's lock) with the number of host answers each call of :meth:`grew` dropped to
    stay within it.
    """

    def __init__(self, limit: int, on_drop: Callable[[int], None] | None = None) -> None:
        self.limit = limit
        self.on_drop = on_drop
        self._tables: OrderedDict[Hashable, AnswerTable] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def table(self, key: Hashable) -> AnswerTable:
        """The table under ``key``, made when missing, marked as just used."""
        with self._lock:
            table = self._tables.get(key)
            if table is None:
                table = self._tables[key] = AnswerTable(self, key)
            else:
                self._tables.move_to_end(key)
            return table

    def grew(self, table: AnswerTable) -> None:
        """``table`` keeps more host answers: count them, drop the oldest tables past the limit.

        The count is the table's own size, not what the caller added: calls that fill one
        table at once, or fill a table another call just dropped, would otherwise count
        answers twice or count answers the store no longer holds, and a store that
        believes itself full drops every table on every call. (Through gunicorn under
        concurrent load a worker's count reached 1,037,056 answers with 935 held.)
        """
        dropped = 0
        with self._lock:
            if self._tables.get(table.key) is not table:
                return  # dropped meanwhile: its answers go with it
            size = len(table)
            self._size += size - table.counted
            table.counted = size
            while self._size > self.limit and len(self._tables) > 1:
                _, oldest = self._tables.popitem(last=False)
                self._size -= oldest.counted
                dropped += oldest.counted
        if dropped and self.on_drop is not None:
            self.on_drop(dropped)

    @property
    def size(self) -> int:
        """Host answers counted in the tables held."""
        return self._size


def store_of(view: KnowledgeView, limit: int,
             on_drop: Callable[[int], None] | None = None) -> AnswerStore:
    """The AnswerStore of ``view``'s synced view (``view.root``).

    ``on_drop``, when given, becomes the store's (see AnswerStore), also where another
    caller (a metrics scrape) made the store without one.
    """
    store = view.root.derived(("step-answers", limit), lambda _: AnswerStore(limit))
    if on_drop is not None:
        store.on_drop = on_drop
    return store


def _direct(view: KnowledgeView, names: set[str]) -> tuple[set[str], set[str]]:
    """Of ``names``: ``(hosts asked every time, hosts judged on an overlay's state)``."""
    several = view.root.derived(("hosts-with-several-nodes",), lambda root: frozenset(
        name for name, state in root.hosts.items() if len(state.all_nodes) > 1))
    always = names & several
    return always, (names & view.overlaid) - always if view.overlaid else set()


def _reserved_known(table: AnswerTable, view: KnowledgeView, overlaid: set[str]
                    ) -> tuple[dict[str, Any], set[str]]:
    """Of the ``overlaid`` hosts: ``(answers kept on their very state, hosts to ask)``."""
    kept: dict[str, Any] = {}
    stale: set[str] = set()
    reserved, states = table.reserved, view.hosts
    for host in overlaid:
        entry = reserved.get(host)  # read once: another call may replace it
        if entry is not None and entry[0] is states[host]:
            kept[host] = entry[1]
        else:
            stale.add(host)
    return kept, stale


def _keep_reserved(table: AnswerTable, view: KnowledgeView, stale: set[str],
                   fresh: dict[str, Any]) -> None:
    """Keep the answers just given on the ``stale`` hosts' overlay states."""
    reserved, states = table.reserved, view.hosts
    for host in stale:
        reserved[host] = (states[host], fresh.get(host))


def check_memoised(table: AnswerTable, hosts: Sequence[tuple[Any, Any]], names: set[str],
                   view: KnowledgeView, ordered: list[str], position: dict[str, int],
                   check_all: Callable[[Sequence[tuple[Any, Any]]], dict[str, str]]
                   ) -> dict[str, str]:
    """``check_all(hosts)``, asking it only about the hosts ``table`` does not know.

    ``names``: the host names of ``hosts``; ``ordered``: the same in their order, the
    order of the answer; ``position``: each candidate's place in the request.
    """
    always, overlaid = _direct(view, names)
    kept_reserved, stale = _reserved_known(table, view, overlaid)
    todo = (names - table.known - overlaid) | always | stale
    fresh: dict[str, str] = {}
    if todo:
        fresh = check_all([pair for pair in hosts if pair[0].host in todo])
        kept = todo - always - stale
        answers = table.answers
        for host in kept & fresh.keys():
            answers[host] = fresh[host]
        table.known |= kept
        if stale:
            _keep_reserved(table, view, stale, fresh)
        table.store.grew(table)
    failing = (names & table.answers.keys()) - always - overlaid
    removed = {host: table.answers[host] for host in failing}
    removed.update((host, reason) for host, reason in fresh.items()
                   if host in always or host in stale)
    removed.update((host, reason) for host, reason in kept_reserved.items()
                   if reason is not None)
    return in_order(removed, ordered, position)


#: Past this many hosts, :func:`in_order` and :func:`weigh_memoised` walk the candidates
#: once instead of sorting them or searching for each.
_WALK_FROM = 64


def in_order(removed: dict[str, str], ordered: list[str], position: dict[str, int]
             ) -> dict[str, str]:
    """``removed`` with its hosts in the order of ``ordered`` (which holds them all).

    ``position``: each host's place, the same order. A few are sorted by their place;
    many (a filter removing half of 10,000 candidates) are picked by one walk over
    ``ordered``, half the time of the sort.
    """
    if len(removed) <= 1:
        return removed
    if len(removed) > _WALK_FROM:
        return {host: removed[host] for host in ordered if host in removed}
    return {host: removed[host] for host in sorted(removed, key=position.__getitem__)}


def weigh_memoised(table: AnswerTable, hosts: Sequence[tuple[Any, Any]], names: set[str],
                   ordered: list[str], view: KnowledgeView,
                   weigh_all: Callable[[Sequence[tuple[Any, Any]]], list[float]]
                   ) -> list[float]:
    """``weigh_all(hosts)``, asking it only about the hosts ``table`` does not know.

    ``names``: the host names of ``hosts``; ``ordered``: the same in their order.
    """
    always, overlaid = _direct(view, names)
    kept_reserved, stale = _reserved_known(table, view, overlaid)
    todo = (names - table.known - overlaid) | always | stale
    answers = table.answers
    fresh: dict[int, float] = {}
    if todo:
        indices = [i for i, (c, _) in enumerate(hosts) if c.host in todo]
        weights = weigh_all([hosts[i] for i in indices])
        if len(weights) != len(indices):
            raise ValueError(f"{len(weights)} weights for {len(indices)} hosts")
        kept = todo - always - stale
        for i, weight in zip(indices, weights, strict=True):
            host = hosts[i][0].host
            if host in kept:
                answers[host] = weight
            else:
                fresh[i] = weight
        table.known |= kept
        if stale:
            _keep_reserved(table, view, stale,
                           {hosts[i][0].host: weight for i, weight in fresh.items()})
        table.store.grew(table)
    values: list[float] = list(map(answers.get, ordered))  # type: ignore[arg-type]
    for i, weight in fresh.items():
        values[i] = weight
    if len(kept_reserved) > _WALK_FROM:
        for i in [i for i, host in enumerate(ordered) if host in kept_reserved]:
            values[i] = kept_reserved[ordered[i]]
    else:  # a few reserved hosts: found by list.index, not a walk over every candidate
        for host, weight in kept_reserved.items():
            values[ordered.index(host)] = weight
    return values
