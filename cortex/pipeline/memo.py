"""Step answers kept per knowledge version, so that a repeated request shape costs lookups.

Nova asks again and again for the same few flavors: every instance of a multi-create,
every retry with alternates, every build of a popular GPU flavor. A plugin whose answer
for a host depends only on the host's state, its own options and a small part of the
request declares that part as its ``memo_key`` (:meth:`cortex.plugins.base.Plugin.memo_key`).
The engine then keeps each host's answer per step and key in the synced view it was
computed on (:meth:`cortex.knowledge.view.KnowledgeView.derived`, so the answers go
with the view when the knowledge version moves), and a later request with the same key
asks the plugin only about the hosts it has not judged yet. Hosts whose state the
request's view changed (in-flight reservations, ``KnowledgeView.overlaid``) and hosts
with several nodes (the nodes the caller names may change the answer) are always asked.

The lookups are set and dict operations over host names, done in C: a step whose
answers are all known costs tens of microseconds for a thousand candidates, where the
plugins' own batch methods cost up to milliseconds (the GPU and NUMA rules).

The store is bounded: at most ``limit`` host answers per view, the tables least
recently used dropped first.
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
    without an answer passes); a weigher's holds every known host's raw weight.
    """

    __slots__ = ("known", "answers", "store")

    def __init__(self, store: AnswerStore) -> None:
        self.known: set[str] = set()
        self.answers: dict[str, Any] = {}
        self.store = store


class AnswerStore:
    """The answer tables of one synced view, least recently used first; thread-safe."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._tables: OrderedDict[Hashable, AnswerTable] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def table(self, key: Hashable) -> AnswerTable:
        """The table under ``key``, made when missing, marked as just used."""
        with self._lock:
            table = self._tables.get(key)
            if table is None:
                table = self._tables[key] = AnswerTable(self)
            else:
                self._tables.move_to_end(key)
            return table

    def grew(self, count: int) -> None:
        """``count`` more host answers were kept: drop the oldest tables past the limit."""
        with self._lock:
            self._size += count
            while self._size > self.limit and len(self._tables) > 1:
                _, oldest = self._tables.popitem(last=False)
                self._size -= len(oldest.known)


def store_of(view: KnowledgeView, limit: int) -> AnswerStore:
    """The AnswerStore of ``view``'s synced view (``view.root``)."""
    return view.root.derived(("step-answers", limit), lambda _: AnswerStore(limit))


def _direct(view: KnowledgeView, names: set[str]) -> set[str]:
    """Of ``names``, the hosts that must be asked every time (see the module docstring)."""
    several = view.root.derived(("hosts-with-several-nodes",), lambda root: frozenset(
        name for name, state in root.hosts.items() if len(state.all_nodes) > 1))
    return (names & view.overlaid) | (names & several)


def check_memoised(table: AnswerTable, hosts: Sequence[tuple[Any, Any]], names: set[str],
                   view: KnowledgeView, position: dict[str, int],
                   check_all: Callable[[Sequence[tuple[Any, Any]]], dict[str, str]]
                   ) -> dict[str, str]:
    """``check_all(hosts)``, asking it only about the hosts ``table`` does not know.

    ``names``: the host names of ``hosts``; ``position``: each candidate's place in the
    request, the order of the answer.
    """
    direct = _direct(view, names)
    todo = (names - table.known) | direct
    fresh: dict[str, str] = {}
    if todo:
        fresh = check_all([pair for pair in hosts if pair[0].host in todo])
        kept = todo - direct
        answers = table.answers
        for host in kept & fresh.keys():
            answers[host] = fresh[host]
        table.known |= kept
        table.store.grew(len(kept))
    failing = (names & table.answers.keys()) - direct
    removed = {host: table.answers[host] for host in failing}
    removed.update((host, reason) for host, reason in fresh.items() if host in direct)
    if len(removed) > 1:
        removed = {host: removed[host] for host in sorted(removed, key=position.__getitem__)}
    return removed


def weigh_memoised(table: AnswerTable, hosts: Sequence[tuple[Any, Any]], names: set[str],
                   ordered: list[str], view: KnowledgeView,
                   weigh_all: Callable[[Sequence[tuple[Any, Any]]], list[float]]
                   ) -> list[float]:
    """``weigh_all(hosts)``, asking it only about the hosts ``table`` does not know.

    ``names``: the host names of ``hosts``; ``ordered``: the same in their order.
    """
    direct = _direct(view, names)
    todo = (names - table.known) | direct
    answers = table.answers
    fresh: dict[int, float] = {}
    if todo:
        indices = [i for i, (c, _) in enumerate(hosts) if c.host in todo]
        weights = weigh_all([hosts[i] for i in indices])
        if len(weights) != len(indices):
            raise ValueError(f"{len(weights)} weights for {len(indices)} hosts")
        kept = todo - direct
        for i, weight in zip(indices, weights, strict=True):
            host = hosts[i][0].host
            if host in kept:
                answers[host] = weight
            else:
                fresh[i] = weight
        table.known |= kept
        table.store.grew(len(kept))
    values: list[float] = list(map(answers.get, ordered))  # type: ignore[arg-type]
    for i, weight in fresh.items():
        values[i] = weight
    return values
