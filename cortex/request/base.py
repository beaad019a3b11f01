"""Pieces shared by the Nova, Cinder and Manila request parsers."""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import repeat
from types import MappingProxyType
from typing import Any, NamedTuple, overload

ENVELOPE_DATA_KEYS = ("nova_object.data", "versioned_object.data")
EMPTY: Mapping[str, Any] = MappingProxyType({})


class BadRequest(ValueError):
    """The body is well-formed JSON but cannot be a scheduling request (answered with 400)."""


def unwrap(value: Any) -> dict[str, Any]:
    """The fields of one object: an oslo envelope's ``data``, or the plain dict itself.

    ``{"nova_object.name": …, "nova_object.data": {...}}`` (Nova) and
    ``{"versioned_object.data": {...}}`` (Cinder, Manila) become their ``data`` dict;
    a plain dict is returned as is; anything else (None) becomes ``{}``. Only one level:
    parsers unwrap each nested object they read, so unknown, deeply nested fields are
    never walked.
    """
    if not isinstance(value, dict):
        return {}
    for key in ENVELOPE_DATA_KEYS:
        if key in value:
            inner = value[key]
            return inner if isinstance(inner, dict) else {}
    return value


def frozen(mapping: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """A read-only view of ``mapping`` (an empty one for None)."""
    return MappingProxyType(dict(mapping)) if mapping else EMPTY


def hashable(value: Any) -> Any:
    """``value`` as a hashable equal stand-in: mappings as sorted item tuples, lists as tuples.

    For memo keys (:meth:`cortex.plugins.base.Plugin.memo_key`): two values that are
    equal give equal stand-ins, and a mapping never equals a sequence of pairs.
    """
    if isinstance(value, Mapping):
        return (Mapping, tuple(sorted((k, hashable(v)) for k, v in value.items())))
    if isinstance(value, list | tuple):
        return tuple(hashable(v) for v in value)
    return value


def strings(value: Any) -> tuple[str, ...]:
    """A tuple of strings from a list, a single scalar (older callers) or None."""
    if value is None:
        return ()
    if isinstance(value, list | tuple):
        return tuple(str(v) for v in value)
    return (str(value),)


class Candidate(NamedTuple):
    """One host the caller offers.

    ``host`` is ranked and answered; ``nodes`` are the ``hypervisor_hostname`` values
    the caller named for it (may be empty); ``weight`` is the caller's weight. A
    NamedTuple, not a frozen dataclass: a request builds one per host (1,000s) and a
    tuple is several times cheaper to make.
    """

    host: str
    nodes: tuple[str, ...]
    weight: float


class CandidateList(Sequence[Candidate]):
    """The caller's hosts in its order as three columns, read as Candidates.

    ``hosts``: the distinct host names; ``nodes``: per host, the ``hypervisor_hostname``
    values named for it (a tuple, may be empty); ``weights``: per host, the caller's
    weight (float); each column a tuple, read-only as the request is. Indexing and
    iterating give :class:`Candidate` tuples, made when
    asked: the engine reads the columns, and builds a Candidate only for a host a step
    has to ask its plugin about (at 10,000 hosts, making every Candidate when the body
    is parsed took ~2 ms of a call whose steps then asked about none). Equal to another
    CandidateList or to a tuple of the same Candidates.
    """

    __slots__ = ("_named", "_nodes", "hosts", "weights")

    def __init__(self, hosts: Sequence[str], nodes: Sequence[tuple[str, ...]],
                 weights: Sequence[float]) -> None:
        if not len(hosts) == len(nodes) == len(weights):
            raise ValueError("hosts, nodes and weights differ in length")
        self.hosts: tuple[str, ...] = tuple(hosts)
        self._nodes: tuple[tuple[str, ...], ...] | None = tuple(nodes)
        self._named: Sequence[str | None] = ()
        self.weights: tuple[float, ...] = tuple(weights)

    @classmethod
    def one_node_each(cls, hosts: Sequence[str], named: Sequence[str | None],
                      weights: Sequence[float]) -> CandidateList:
        """The list where host ``i`` names the one node ``named[i]`` (None or "": none).

        Nova's case: its nodes column is made when first read, which a call whose step
        answers are all kept never does (~0.5 ms at 10,000 hosts). ValueError as the
        constructor.
        """
        if not len(hosts) == len(named) == len(weights):
            raise ValueError("hosts, nodes and weights differ in length")
        made = cls.__new__(cls)
        made.hosts, made.weights = tuple(hosts), tuple(weights)
        made._nodes, made._named = None, named
        return made

    @property
    def nodes(self) -> tuple[tuple[str, ...], ...]:
        """Per host, the ``hypervisor_hostname`` values named for it (a tuple, may be empty)."""
        if self._nodes is None:
            named = self._named
            self._nodes = (tuple(zip(named)) if all(named)  # type: ignore[arg-type]
                           else tuple((node,) if node else () for node in named))
        return self._nodes

    def __len__(self) -> int:
        return len(self.hosts)

    @overload
    def __getitem__(self, index: int) -> Candidate: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Candidate, ...]: ...

    def __getitem__(self, index: int | slice) -> Candidate | tuple[Candidate, ...]:
        if isinstance(index, slice):
            return tuple(self)[index]
        return Candidate(self.hosts[index], self.nodes[index], self.weights[index])

    def __iter__(self) -> Iterator[Candidate]:
        # tuple.__new__ makes each Candidate in C, where the class's own __new__ is a
        # Python call per host (~0.3 µs)
        return map(tuple.__new__, repeat(Candidate), zip(self.hosts, self.nodes, self.weights,
                                                         strict=True))

    def take(self, positions: Iterable[int]) -> Iterator[Candidate]:
        """The Candidates at ``positions`` (ints), in their order."""
        at = positions if isinstance(positions, list | range) else list(positions)
        return map(tuple.__new__, repeat(Candidate), zip(
            map(self.hosts.__getitem__, at), map(self.nodes.__getitem__, at),
            map(self.weights.__getitem__, at), strict=True))

    def _columns(self) -> tuple[tuple[Any, ...], ...]:
        return self.hosts, self.nodes, self.weights

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CandidateList):
            return self._columns() == other._columns()
        if isinstance(other, tuple):
            return tuple(self) == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._columns())

    def __repr__(self) -> str:
        return f"CandidateList({list(self)!r})"


_HOST_OF = operator.itemgetter("host")
_NODE_OF = operator.itemgetter("hypervisor_hostname")
_NODE_OR_NONE_OF = operator.methodcaller("get", "hypervisor_hostname")


def parse_candidates(body: Mapping[str, Any]) -> CandidateList:
    """The caller's hosts in its order, one candidate per distinct ``host``.

    A host named several times with different nodes (Ironic, VMware clusters) is one
    candidate with all its nodes, at the position of its first entry. Raises
    BadRequest when a host has no weight or a weight names no host (contract table).
    The columns are read with map() over the entries, not a Python loop per host; when
    the weights' keys are the hosts in their order (Nova's bodies), that comparison
    alone proves both rules, and the weights are read in order.
    """
    weights = body["weights"]
    entries = body["hosts"]
    hosts = list(map(_HOST_OF, entries))
    if list(weights) == hosts:
        # Nova writes its weights in its hosts' order: each host named once, each with a
        # weight, no weight of another host (the keys of a map are distinct)
        try:  # every entry names its node (Nova always does): 4x faster than .get
            named = list(map(_NODE_OF, entries))
        except KeyError:
            named = list(map(_NODE_OR_NONE_OF, entries))
        return CandidateList.one_node_each(hosts, named, list(map(float, weights.values())))
    distinct = dict.fromkeys(hosts)
    if len(distinct) == len(entries):  # each host named once
        named = list(map(_NODE_OR_NONE_OF, entries))
        found: list[tuple[str, ...]] = [(node,) if node else () for node in named]
    else:
        grouped: dict[str, list[str]] = {}
        for entry in entries:
            node = entry.get("hypervisor_hostname")
            names = grouped.setdefault(entry["host"], [])
            if node and node not in names:
                names.append(node)
        hosts, found = list(grouped), [tuple(n) for n in grouped.values()]
    if distinct.keys() != weights.keys():
        missing = [h for h in distinct if h not in weights]
        if missing:
            raise BadRequest(f"hosts without a weight: {', '.join(sorted(missing)[:5])}")
        extra = [h for h in weights if h not in distinct]
        raise BadRequest(f"weights for hosts not in 'hosts': {', '.join(sorted(extra)[:5])}")
    return CandidateList(hosts, found, list(map(float, map(weights.__getitem__, hosts))))


def context_ids(body: Mapping[str, Any]) -> tuple[str | None, str | None, str | None]:
    """``(request_id, global_request_id, project_id)`` from the caller's context."""
    context = body.get("context") or {}
    return (context.get("request_id"), context.get("global_request_id"),
            context.get("project_id") or context.get("project"))
