"""What the topology plugins share: options, the verdict without a report, shared answers.

:class:`TopologyFilter` and :class:`TopologyWeigher` are the plugins whose answer on a
host reads only its topology (and what they name besides): kept per request
``topology_key`` (the memo) and computed once per topology state (:func:`shared_answer`).
A subclass computes :meth:`TopologyFilter.refusal` or :meth:`TopologyWeigher.score`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from cortex.knowledge.topology import state_id
from cortex.knowledge.view import HostState
from cortex.plugins.base import Filter, Weigher
from cortex.request import Candidate, NovaRequest
from cortex.rules.measures import allocation_ratios

T = TypeVar("T")
#: Answers kept by topology state; past this many the table starts over (0: none kept).
ANSWER_LIMIT = 200_000
_ANSWERS: dict[tuple, Any] = {}

UNKNOWN_POLICIES = ("pass", "fail")


@dataclass(frozen=True)
class TopologyOptions:
    """Options of the topology filters.

    ``unknown_topology``: a host without an agent report ``pass``es (Nova already checked
    it with what Nova knows) or ``fail``s (only hosts Cortex can vouch for).
    """

    unknown_topology: str = "pass"

    def __post_init__(self) -> None:
        if self.unknown_topology not in UNKNOWN_POLICIES:
            raise ValueError(f"unknown_topology must be one of {', '.join(UNKNOWN_POLICIES)}")


def unknown_topology(options: TopologyOptions) -> str | None:
    """The verdict on a host with no topology report: None (pass) or the reason."""
    return None if options.unknown_topology == "pass" else "no topology report from cortex-agent"


def shared_answer(plugin: Any, host: Any, candidate: Any, request: Any,
                  compute: Callable[[], T], extra: Hashable = ()) -> T:
    """``compute()``, shared by every host in the same topology state.

    For a topology plugin whose answer on a host reads only the host's topology, the
    named node's allocation ratios, the request's ``topology_key``, its own options and
    ``extra`` (what else it reads, e.g. the node's free capacity): the answer is kept
    under the topology's :func:`cortex.knowledge.topology.state_id` and those, so hosts
    in equal states (a fleet repeats a few models and usage levels) compute it once,
    and a host whose topology outlives a knowledge version (the loader keeps unchanged
    reports' objects) keeps its answers. Hosts without a topology are computed.
    """
    topology = host.topology
    if topology is None or ANSWER_LIMIT <= 0:
        return compute()
    answers = _table(plugin, request)
    key = (state_id(topology), allocation_ratios(host, candidate), extra)
    try:
        return answers[key]
    except KeyError:
        pass
    value = compute()
    if _SIZE[0] >= ANSWER_LIMIT:
        _ANSWERS.clear()
        _SIZE[0] = 0
        answers = _table(plugin, request)
    answers[key] = value
    _SIZE[0] += 1
    return value


_SIZE = [0]
#: ``(plugin, request, table)`` last asked, one tuple read and written whole (threads):
#: the hosts of one request's step follow each other, and the request's key is a tuple
#: whose hash Python does not keep. Held, so neither object's identity can be reused.
_LAST: list[Any] = [None]


def _table(plugin: Any, request: Any) -> dict:
    """The answers of ``plugin`` for requests with ``request``'s topology key."""
    last = _LAST[0]
    if last is not None and last[0] is plugin and last[1] is request:
        return last[2]
    key = (plugin.memo_identity, request.topology_key)
    table = _ANSWERS.get(key)
    if table is None:
        table = _ANSWERS[key] = {}
    _LAST[0] = (plugin, request, table)
    return table


class TopologyFilter(Filter[NovaRequest, HostState]):
    """A filter judging a host by its topology: :meth:`refusal` once per topology state.

    Its answers depend on nothing of the request but its ``topology_key`` (the memo's
    key) and are shared by hosts in equal topology states (:func:`shared_answer`).
    """

    services: ClassVar[tuple[str, ...]] = ("nova", "kubernetes")
    Options: ClassVar[type] = TopologyOptions

    def memo_key(self, request: NovaRequest) -> tuple:
        """The request's topology key: its answers depend on nothing else of it."""
        return request.topology_key

    def check(self, host: HostState, request: NovaRequest, candidate: Candidate) -> str | None:
        """:meth:`refusal`, shared by every host in the same topology state."""
        return shared_answer(self, host, candidate, request,
                             lambda: self.refusal(host, request, candidate))

    def refusal(self, host: HostState, request: NovaRequest, candidate: Candidate
                ) -> str | None:
        """None when ``host``'s topology holds ``request``, else the reason."""
        raise NotImplementedError


class TopologyWeigher(Weigher[NovaRequest, HostState]):
    """A weigher scoring a host by its topology: :meth:`score` once per topology state.

    Its answers depend on nothing of the request but its ``topology_key`` and on
    nothing of the host but its topology, the named node's allocation ratios and
    :meth:`shared_under` (:func:`shared_answer`).
    """

    services: ClassVar[tuple[str, ...]] = ("nova", "kubernetes")

    def applies(self, request: NovaRequest) -> bool:
        """Only for requests of passthrough GPUs (a subclass may widen it)."""
        return request.gpu_count > 0

    def memo_key(self, request: NovaRequest) -> tuple:
        """The request's topology key: its answers depend on nothing else of it."""
        return request.topology_key

    def weigh(self, host: HostState, request: NovaRequest, candidate: Candidate) -> float:
        """:meth:`score`, shared by every host in the same topology state."""
        return shared_answer(self, host, candidate, request,
                             lambda: self.score(host, request, candidate),
                             self.shared_under(host, request, candidate))

    def shared_under(self, host: HostState, request: NovaRequest, candidate: Candidate
                     ) -> Hashable:
        """What else of the host :meth:`score` reads; default nothing."""
        return ()

    def score(self, host: HostState, request: NovaRequest, candidate: Candidate) -> float:
        """The raw weight of ``host`` for ``request``."""
        raise NotImplementedError
