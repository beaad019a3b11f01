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

The answers are columns over the synced view's hosts (:class:`HostIndex`): a filter's
table holds, per host, the number of its reason (or "passes", or "not judged"), a
weigher's the raw weight and whether it is known. A step over 10,000 candidates is then
a few numpy operations on the candidates' view positions, where sets and dicts of host
names cost ~2 ms a step.

A host whose state the request's view changed (in-flight reservations,
``KnowledgeView.overlaid``) has its answer kept apart, with the state object it was
judged on, and used again only while the view holds that very object
(:func:`cortex.knowledge.reservations.with_reservations` keeps a host's reserved state
while its reservations stay the same). A busy cloud has a reservation in flight on
thousands of hosts; asking about each of them on every call cost ~35 µs per such host.

The store is bounded: a table holds room for an answer per host of the synced view
(4 bytes a host for a filter, 20 for a weigher: its code, raw weight and tanh), and
the store at most ``limit`` such host answers per view, the tables least recently used
dropped first; a request naming few hosts costs the table of a whole fleet all the
same, so the bound holds whatever the requests. Each drop is reported to the store's
``on_drop`` (the API counts them in ``cortex_step_answers_dropped_total``): answers
dropped steadily mean the limit is too small for the request shapes the cloud asks,
and their steps are asked again.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any, overload

import numpy as np

from cortex.knowledge.view import KnowledgeView
from cortex.request import Candidate, CandidateList

#: Host answers (a table's room for one host) kept per synced view by default: at most
#: ~20 MB, at 1,000 hosts ~1,000 tables (~50 request shapes), at 10,000 ~100.
DEFAULT_LIMIT = 1_000_000
#: A table's code for a host it has not judged.
UNKNOWN = -2
#: A filter table's code for a host that passes (a weigher's for a known weight).
PASSES = -1


@dataclass(frozen=True, slots=True)
class HostIndex:
    """The positions of a synced view's candidates for one service, and what is always asked.

    ``positions``: name -> position (0 .. len - 1) of every state
    ``view.states_for(service)`` holds; ``several``: per position, whether the host has
    more than one node (its answer may depend on the nodes the caller names, so it is
    asked every time).
    """

    positions: dict[str, int]
    several: np.ndarray

    def __len__(self) -> int:
        """The number of positions."""
        return len(self.positions)


def host_index(view: KnowledgeView, service: str) -> HostIndex:
    """The :class:`HostIndex` of ``view``'s synced view (``view.root``) for ``service``."""
    def build(root: KnowledgeView) -> HostIndex:
        states = root.states_for(service)
        several = np.fromiter((len(getattr(state, "all_nodes", ())) > 1
                               for state in states.values()), bool, len(states))
        return HostIndex(dict(zip(states, range(len(states)), strict=True)), several)
    return view.root.derived(("host-index", service), build)


class AnswerTable:
    """One step's answers under one request key, a column per synced host.

    ``codes[position]``: :data:`UNKNOWN`, :data:`PASSES`, or for a filter the number of
    the host's reason in ``reasons`` (a weigher's known hosts are :data:`PASSES`, their
    raw weights in ``values`` and ``math.tanh`` of them in ``tanh``, the term Cortex's
    weighing adds up). Both are answers on the synced states. ``reserved``
    holds, per host name, the answer on a state an overlay made: ``(that state, answer)``,
    the answer None for a filter's pass.
    """

    __slots__ = ("codes", "values", "tanh", "reasons", "numbers", "reserved", "store", "key",
                 "counted", "_lock")

    def __init__(self, store: AnswerStore, key: Hashable = None, size: int = 0,
                 weighs: bool = False) -> None:
        self.codes = np.full(size, UNKNOWN, np.int32)
        self.values = np.zeros(size) if weighs else None
        self.tanh = np.zeros(size) if weighs else None
        self.reasons: list[str] = []
        self.numbers: dict[str, int] = {}
        self.reserved: dict[str, tuple[Any, Any]] = {}
        self.store = store
        self.key = key
        self.counted = 0  # host answers the store has counted for this table
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Host answers it holds room for: one per synced host, and those kept on overlays."""
        return len(self.codes) + len(self.reserved)

    def number(self, reason: str | None) -> int:
        """The code of a filter's answer: :data:`PASSES` for None, else its reason's number."""
        if reason is None:
            return PASSES
        found = self.numbers.get(reason)
        if found is None:
            with self._lock:  # a reason is listed before its number is handed out
                found = self.numbers.get(reason)
                if found is None:
                    self.reasons.append(reason)
                    found = self.numbers[reason] = len(self.reasons) - 1
        return found


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

    def table(self, key: Hashable, size: int = 0, weighs: bool = False) -> AnswerTable:
        """The table under ``key``, made when missing (``size`` hosts), marked as just used.

        ``weighs``: a weigher's table (raw weights) rather than a filter's (reasons).
        """
        with self._lock:
            table = self._tables.get(key)
            if table is not None:
                self._tables.move_to_end(key)
                return table
            table = self._tables[key] = AnswerTable(self, key, size, weighs)
        self.grew(table)  # counted from the start: its columns take their room at once
        return table

    def grew(self, table: AnswerTable) -> None:
        """``table`` is new or holds more: count it, drop the oldest tables past the limit.

        The count is the table's own size, not what the caller added: calls that fill one
        table at once, or fill a table another call just dropped, would otherwise count
        answers twice or count answers the store no longer holds, and a store that
        believes itself full drops every table on every call. (Through gunicorn under
        concurrent load a worker's count reached 1,037,056 answers with 935 held.)
        """
        dropped = 0
        size = len(table)
        with self._lock:
            if self._tables.get(table.key) is not table:
                return  # dropped meanwhile: its answers go with it
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


@dataclass(slots=True)
class Candidates:
    """The hosts a step judges, as columns over the request's candidates.

    ``candidates``: the request's :class:`~cortex.request.CandidateList`; ``at``: the
    positions in it of the hosts the request's view knows, the judged hosts (None: all
    of them, in order); ``names``: their host names, in the caller's order;
    ``positions``: each one's position in the synced view's :class:`HostIndex`;
    ``several``: per host, whether it is asked every time (several nodes, or a host the
    synced view lacks); ``direct``: whether its answer is never taken from a table's
    columns (``several``, or a state an overlay changed); ``states``: the request
    view's states (overlays included). The ``(candidate, state)`` pairs a plugin is
    asked about are made when asked (:meth:`pairs_of`).
    """

    candidates: CandidateList
    at: list[int] | None
    names: Sequence[str]
    positions: np.ndarray
    direct: np.ndarray
    several: np.ndarray
    states: Any
    _at: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None

    def pairs_of(self, rows: Sequence[int]) -> JudgedPairs:
        """The ``(candidate, state)`` pairs of the judged ``rows``, in their order."""
        return JudgedPairs(self, rows)

    def columns_at(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(view positions, direct flags, direct rows)`` of ``rows`` (ascending).

        Kept while the steps judge the very same array: a filter that removes nothing
        hands its rows on, and the weighers all judge one array.
        """
        if self._at is None or self._at[0] is not rows:
            direct = self.direct[rows]
            self._at = (rows, self.positions[rows], direct, rows[direct])
        return self._at[1], self._at[2], self._at[3]


class JudgedPairs(Sequence[tuple[Candidate, Any]]):
    """The ``(candidate, state)`` pairs of some judged rows, made when read.

    What a plugin's ``check_all``/``weigh_all`` is given: iterating makes every pair
    with map() over the columns; a plugin that needs only the length (a weigher that
    gives every host 0) makes none.
    """

    __slots__ = ("_judged", "_rows")

    def __init__(self, judged: Candidates, rows: Sequence[int]) -> None:
        self._judged, self._rows = judged, rows

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, index: int) -> tuple[Candidate, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[tuple[Candidate, Any]]: ...

    def __getitem__(self, index: int | slice
                    ) -> tuple[Candidate, Any] | list[tuple[Candidate, Any]]:
        if isinstance(index, slice):
            return list(JudgedPairs(self._judged, self._rows[index]))
        judged, row = self._judged, self._rows[index]
        return (judged.candidates[row if judged.at is None else judged.at[row]],
                judged.states[judged.names[row]])

    def __iter__(self) -> Iterator[tuple[Candidate, Any]]:
        judged, rows = self._judged, self._rows
        at = rows if judged.at is None else map(judged.at.__getitem__, rows)
        return zip(judged.candidates.take(at),
                   map(judged.states.__getitem__, map(judged.names.__getitem__, rows)),
                   strict=True)


def candidates_of(candidates: CandidateList, view: KnowledgeView, service: str
                  ) -> Candidates:
    """The :class:`Candidates` of the request's ``candidates`` that ``view`` knows.

    Found by their positions in the synced view's :class:`HostIndex`: an overlay
    replaces states but adds and removes no host, so a host the synced view lacks is
    looked up in ``view`` itself, and one found there (none in practice) is asked
    directly, as a host with several nodes is.
    """
    index = host_index(view, service)
    states = view.states_for(service)
    hosts = candidates.hosts
    positions = np.fromiter(map(index.positions.get, hosts, repeat(-1)), np.intp, len(hosts))
    missing = positions < 0
    at: list[int] | None = None
    names: Sequence[str] = hosts
    if missing.any():
        known = ~missing
        for row in np.flatnonzero(missing).tolist():
            known[row] = hosts[row] in states
        if not known.all():
            at = np.flatnonzero(known).tolist()
            names, positions, missing = [hosts[i] for i in at], positions[known], missing[known]
    positions[missing] = 0
    several = index.several[positions] | missing
    direct = several.copy()
    if view.overlaid:  # by position: the overlaid hosts are few, the candidates many
        changed = np.fromiter(map(index.positions.get, view.overlaid, repeat(-1)), np.intp,
                              len(view.overlaid))
        direct |= np.isin(positions, changed[changed >= 0])
    return Candidates(candidates, at, names, positions, direct, several, states)


def _ask_directly(table: AnswerTable, judged: Candidates, rows: np.ndarray
                  ) -> tuple[list[int], dict[int, Any]]:
    """Of the direct ``rows``: ``(rows to ask, answers kept on their very overlay state)``."""
    ask: list[int] = []
    kept: dict[int, Any] = {}
    reserved, states, names, several = table.reserved, judged.states, judged.names, judged.several
    for row in rows.tolist():
        if several[row]:
            ask.append(row)
            continue
        name = names[row]
        entry = reserved.get(name)  # read once: another call may replace it
        if entry is not None and entry[0] is states[name]:
            kept[row] = entry[1]
        else:
            ask.append(row)
    return ask, kept


def _rows_to_ask(table: AnswerTable, judged: Candidates, rows: np.ndarray
                 ) -> tuple[np.ndarray, list[int], dict[int, Any]]:
    """Of ``rows`` (ascending): ``(their codes, rows to ask, direct rows' kept answers)``."""
    where, direct, direct_rows = judged.columns_at(rows)
    codes = table.codes[where]
    unknown = rows[(codes == UNKNOWN) & ~direct]
    ask, kept = _ask_directly(table, judged, direct_rows) if len(direct_rows) else ([], {})
    if ask:
        return codes, sorted([*unknown.tolist(), *ask]), kept
    return codes, unknown.tolist(), kept


def _keep(table: AnswerTable, judged: Candidates, asked: list[int], answers: list[Any],
          codes: list[int], tanh: list[float] | None = None) -> None:
    """Keep the answers just given for the ``asked`` rows: columns, or overlay states.

    ``codes`` (and for a weigher ``tanh``): what the columns hold for each answer.
    """
    direct = judged.direct
    synced = [i for i, row in enumerate(asked) if not direct[row]]
    if synced:
        where = judged.positions[[asked[i] for i in synced]]
        if table.values is not None and table.tanh is not None and tanh is not None:
            table.values[where] = [answers[i] for i in synced]
            table.tanh[where] = [tanh[i] for i in synced]
        table.codes[where] = [codes[i] for i in synced]  # last: the weights are in place
    if len(synced) < len(asked):
        reserved, states, names, several = (table.reserved, judged.states, judged.names,
                                            judged.several)
        for row, answer in zip(asked, answers, strict=True):
            if direct[row] and not several[row]:
                name = names[row]
                reserved[name] = (states[name], answer)
        table.store.grew(table)  # the columns were counted when the table was made


def check_memoised(table: AnswerTable, judged: Candidates, rows: np.ndarray,
                   check_all: Callable[[Sequence[tuple[Any, Any]]], dict[str, str]]
                   ) -> tuple[dict[str, str], np.ndarray]:
    """``check_all`` of the ``rows`` of ``judged`` (ascending), asking only what ``table`` lacks.

    Returns ``(removed, failing)``: host -> reason in the rows' order, and a bool per
    row, whether it fails.
    """
    codes, ask, kept = _rows_to_ask(table, judged, rows)
    # codes is a copy (numpy's fancy indexing): this call's answers go in it
    if ask:
        names = judged.names
        fresh = check_all(judged.pairs_of(ask))
        answers = [fresh.get(names[row]) for row in ask]
        numbers = list(map(table.number, answers))
        _keep(table, judged, ask, answers, numbers)
        codes[np.searchsorted(rows, ask)] = numbers
    if kept:
        codes[np.searchsorted(rows, list(kept))] = list(map(table.number, kept.values()))
    failing = codes >= 0
    if not failing.any():
        return {}, failing
    removed = dict(zip(map(judged.names.__getitem__, rows[failing].tolist()),
                       map(table.reasons.__getitem__, codes[failing].tolist()), strict=True))
    return removed, failing


def weigh_memoised(table: AnswerTable, judged: Candidates, rows: np.ndarray,
                   weigh_all: Callable[[Sequence[tuple[Any, Any]]], list[float]]
                   ) -> tuple[np.ndarray, np.ndarray]:
    """``weigh_all`` of the ``rows`` of ``judged`` (ascending), asking only what ``table`` lacks.

    ``(raw weights, math.tanh of them)`` in the rows' order, as float64 arrays.
    ValueError when ``weigh_all`` gives a number of weights other than the hosts it was
    asked about.
    """
    assert table.values is not None and table.tanh is not None
    _, ask, kept = _rows_to_ask(table, judged, rows)
    where = judged.columns_at(rows)[0]
    values, tanh = table.values[where], table.tanh[where]
    if ask:
        weights = list(weigh_all(judged.pairs_of(ask)))
        if len(weights) != len(ask):
            raise ValueError(f"{len(weights)} weights for {len(ask)} hosts")
        terms = list(map(math.tanh, weights))
        _keep(table, judged, ask, weights, [PASSES] * len(ask), terms)
        at = np.searchsorted(rows, ask)
        values[at] = weights
        tanh[at] = terms
    if kept:
        at = np.searchsorted(rows, list(kept))
        values[at] = list(kept.values())
        tanh[at] = list(map(math.tanh, kept.values()))
    return values, tanh
