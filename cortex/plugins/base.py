"""The plugin contract: a filter answers one question per host, a weigher gives a number.

Nova's scheduler contract (``nova/scheduler/filters``, ``nova/scheduler/weights``),
with one change taken from the Kubernetes scheduler framework: a filter returns the
reason a host fails instead of a bare boolean, so every removal is explained.
Plugins see the typed request (:mod:`cortex.request`) and the host's state from the
knowledge view (:class:`~cortex.knowledge.view.HostState` for Nova,
:class:`~cortex.knowledge.view.StoragePoolState` for Cinder and Manila); they never
touch the database.

The contract the engine relies on is :class:`FilterContract` and
:class:`WeigherContract` (typing Protocols over the request and state types);
:class:`Filter` and :class:`Weigher` implement it for in-tree and entry-point plugins,
parametrised by the request and state they judge, e.g. ``Filter[NovaRequest,
HostState]``, so a type checker holds every plugin to it.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from cortex.knowledge.view import HostState, KnowledgeView, StoragePoolState
from cortex.request import Candidate, SchedulingRequest

#: The request a plugin judges, and the state of a host (or pool) it judges it on.
RequestT = TypeVar("RequestT", bound=SchedulingRequest)
StateT = TypeVar("StateT", bound=HostState | StoragePoolState)
_R = TypeVar("_R", bound=SchedulingRequest, contravariant=True)
_S = TypeVar("_S", bound=HostState | StoragePoolState, contravariant=True)


class FilterContract(Protocol[_R, _S]):
    """What the engine asks of a filter step (see :class:`Filter`)."""

    name: str
    run_on_rebuild: bool
    detail: str | None

    def applies(self, request: _R) -> bool:
        """False to skip the step for ``request``."""

    @property
    def memo_identity(self) -> Hashable:
        """What tells this plugin's kept answers from another's (name and options)."""

    def memo_key(self, request: _R) -> Hashable | None:
        """What of ``request`` the answers depend on; None: not memoised."""

    def bind(self, request: _R, view: KnowledgeView) -> FilterContract[_R, _S]:
        """The filter that judges ``request``'s hosts."""

    def check(self, host: _S, request: _R, candidate: Candidate) -> str | None:
        """None when ``host`` passes, else the reason."""

    def check_all(self, hosts: Sequence[tuple[Candidate, _S]], request: _R,
                  view: KnowledgeView | None) -> dict[str, str]:
        """``{host name: reason}`` of the hosts that fail."""


class WeigherContract(Protocol[_R, _S]):
    """What the engine asks of a weigher step (see :class:`Weigher`)."""

    name: str
    detail: str | None

    def applies(self, request: _R) -> bool:
        """False to skip the step for ``request``."""

    @property
    def memo_identity(self) -> Hashable:
        """What tells this plugin's kept answers from another's (name and options)."""

    def memo_key(self, request: _R) -> Hashable | None:
        """What of ``request`` the answers depend on; None: not memoised."""

    def bind(self, request: _R, view: KnowledgeView) -> WeigherContract[_R, _S]:
        """The weigher that weighs ``request``'s hosts."""

    def weigh(self, host: _S, request: _R, candidate: Candidate) -> float:
        """The raw weight of ``host``."""

    def weigh_all(self, hosts: Sequence[tuple[Candidate, _S]], request: _R,
                  view: KnowledgeView | None) -> list[float]:
        """The raw weights of the hosts, in their order."""


class OptionsError(ValueError):
    """A step's options do not fit its plugin's options dataclass; the message says how."""


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """Options of a plugin that takes none."""


class Plugin(Generic[RequestT, StateT]):
    """Common part of filters and weighers.

    A registered ``name``, the ``services`` it serves and an ``Options`` dataclass
    whose validated instance is ``self.options``.
    """

    name: ClassVar[str] = ""
    services: ClassVar[tuple[str, ...]] = ("nova",)
    Options: ClassVar[type] = NoOptions
    #: What a bound plugin decided for the whole request (one line), kept in the
    #: step's record as ``detail``; None: nothing to say.
    detail: str | None = None
    #: True when ``check``/``weigh`` read only the host's state and the options, never
    #: the request or the candidate: the answer per host is then computed once per
    #: knowledge view (``host_answers``) and shared by every request.
    host_only: ClassVar[bool] = False

    def __init__(self, options: Any = None) -> None:
        self.options = options if options is not None else self.Options()

    def applies(self, request: RequestT) -> bool:
        """False to skip this step for ``request`` (recorded as skipped); default True."""
        return True

    def memo_key(self, request: RequestT) -> Hashable | None:
        """What of ``request`` this plugin's answers depend on; None: they are not memoised.

        A plugin that returns a key promises that its answer for a ``(candidate, host
        state)`` pair depends only on that key, its options, the host's state and, for a
        host with several nodes, the nodes the candidate names: the engine then keeps
        the answers per knowledge version and asks again only about hosts it has not
        judged under that key (:mod:`cortex.pipeline.memo`). Default: ``()`` for a
        ``host_only`` plugin, else None. The key must be hashable and cheap to compute.
        """
        return () if self.host_only else None

    @property
    def memo_identity(self) -> tuple[str, str]:
        """``(name, repr(options))``: what tells this plugin's answers from another's."""
        found = self.__dict__.get("_memo_identity")
        if found is None:
            found = self.__dict__["_memo_identity"] = (self.name, repr(self.options))
        return found

    def bind(self, request: RequestT, view: KnowledgeView) -> typing.Self:
        """The plugin that judges ``request``'s hosts; default ``self``.

        A plugin whose rule needs more than the judged host (the live-migration
        source, the largest candidate) returns a new instance holding what it looked up
        in the KnowledgeView ``view``; the configured instance stays untouched, as it is
        shared by concurrent requests. Called once per request, after ``applies``.
        """
        return self

    def host_answers(self, view: KnowledgeView, service: str) -> dict[str, Any]:
        """This plugin's answers so far per host (or pool) of ``service`` in ``view``.

        For ``host_only`` plugins: keyed by the plugin's name and options, filled lazily
        by the batch methods with ``(host state, answer)`` per host name
        (:meth:`KnowledgeView.per_host`: shared with the view's reservation overlays, an
        answer read only for the very same state); the view discards it with itself when
        the knowledge version moves.
        """
        return view.per_host(("host-answers", self.name, repr(self.options), service))


class Filter(Plugin[RequestT, StateT]):
    """Removes hosts: implement ``check``.

    ``run_on_rebuild`` follows Nova's ``RUN_ON_REBUILD``: most filters do not run
    when a rebuild re-checks the instance's own host.
    """

    run_on_rebuild: ClassVar[bool] = False

    def check(self, host: StateT, request: RequestT, candidate: Candidate) -> str | None:
        """None when ``host`` passes, else a short reason (one line, no trailing dot).

        ``host`` is the HostState (Nova) or StoragePoolState (Cinder, Manila) from the
        knowledge view; ``candidate`` is the caller's Candidate (host, nodes, weight).
        """
        raise NotImplementedError

    def check_all(self, hosts: Sequence[tuple[Candidate, StateT]], request: RequestT,
                  view: KnowledgeView | None) -> dict[str, str]:
        """``{host name: reason}`` of the ``(candidate, host state)`` pairs that fail.

        Exactly what ``check`` says of each pair (a host named twice fails when one of
        its pairs does; the last failing pair's reason is kept). The default asks
        ``check`` pair by pair, remembering a ``host_only`` plugin's answers in the
        KnowledgeView ``view``; a plugin may override it to judge all hosts at once.
        """
        def check(candidate: Candidate, state: StateT) -> str | None:
            return self.check(state, request, candidate)

        if self.host_only and view is not None:
            reasons = _remembered(self.host_answers(view, request.service), hosts, check)
        else:
            reasons = [check(candidate, state) for candidate, state in hosts]
        return {candidate.host: reason for (candidate, _), reason in zip(hosts, reasons,
                                                                          strict=True)
                if reason is not None}


class Weigher(Plugin[RequestT, StateT]):
    """Orders hosts: implement ``weigh``.

    Higher raw values are better; a negative multiplier in the pipeline inverts the preference.
    ``normalize_bounds``: the ``(minval, maxval)`` Nova's weigher of the same measure
    clamps and normalises with, for pipelines that weigh as Nova does (``weighing:
    nova``, :func:`cortex.decision.nova_normalize`); None: no bound.
    """

    normalize_bounds: tuple[float | None, float | None] = (None, None)

    def weigh(self, host: StateT, request: RequestT, candidate: Candidate) -> float:
        """The raw weight of ``host`` for ``request`` (any float; tanh-squashed later)."""
        raise NotImplementedError

    def weigh_all(self, hosts: Sequence[tuple[Candidate, StateT]], request: RequestT,
                  view: KnowledgeView | None) -> list[float]:
        """The raw weights of the ``(candidate, host state)`` pairs, in their order.

        Exactly ``float(weigh(...))`` of each pair. The default asks ``weigh`` pair by
        pair, remembering a ``host_only`` plugin's weights in the KnowledgeView
        ``view``; a plugin may override it to weigh all hosts at once.
        """
        def weigh(candidate: Candidate, state: StateT) -> float:
            return float(self.weigh(state, request, candidate))

        if self.host_only and view is not None:
            return _remembered(self.host_answers(view, request.service), hosts, weigh)
        return [weigh(candidate, state) for candidate, state in hosts]


@dataclasses.dataclass(frozen=True, slots=True)
class MoveCandidate:
    """An instance a detector would move off its host, and why.

    ``instance_uuid`` on ``host``; ``detector`` the detector's name; ``reason`` one line
    for the operator and the move's record; ``score`` orders candidates (higher first;
    the descheduler tries them in that order); ``gpus`` the passthrough GPUs it holds
    there (PCI addresses; empty when none or unknown); ``frees_gpus`` how many GPUs of
    whole free NVLink cells the move would win on ``host`` (0 when the detector does not
    count cells).
    """

    instance_uuid: str
    host: str
    detector: str
    reason: str
    score: float = 0.0
    gpus: tuple[str, ...] = ()
    frees_gpus: int = 0


class Detector:
    """Finds instances worth moving: implement ``detect``.

    The descheduler's plugin kind, registered as filters and weighers are
    (``@register``, or the ``cortex.detectors`` entry-point group). A detector reads
    the knowledge view only, as filters do; where an instance could go is the
    pipelines' answer, never the detector's. ``Options`` is its options dataclass.
    """

    name: ClassVar[str] = ""
    Options: ClassVar[type] = NoOptions

    def __init__(self, options: Any = None) -> None:
        self.options = options if options is not None else self.Options()

    def detect(self, view: KnowledgeView, now: Any) -> list[MoveCandidate]:
        """The instances to move off their hosts in ``view`` at ``now`` (UTC datetime)."""
        raise NotImplementedError


def build_options(plugin: type[Plugin] | type[Detector], raw: Mapping[str, Any] | None) -> Any:
    """Validate ``raw`` (from pipelines.yaml) against ``plugin.Options``; raise OptionsError.

    Unknown keys and wrong types are errors; missing keys take the dataclass defaults.
    Types understood: bool, int, float (ints accepted), str, ``X | None``,
    ``list[T]``/``tuple[T, ...]`` and ``dict[str, T]``.
    """
    raw = dict(raw or {})
    fields = {f.name: f for f in dataclasses.fields(plugin.Options)}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise OptionsError(f"{plugin.name}: unknown option(s) {', '.join(unknown)} "
                           f"(known: {', '.join(fields) or 'none'})")
    hints = typing.get_type_hints(plugin.Options)
    values = {}
    for key, value in raw.items():
        if not _conforms(value, hints[key]):
            raise OptionsError(f"{plugin.name}: option {key}={value!r} is not "
                               f"{_type_name(hints[key])}")
        values[key] = tuple(value) if typing.get_origin(hints[key]) is tuple else value
    try:
        return plugin.Options(**values)
    except (TypeError, ValueError) as exc:
        raise OptionsError(f"{plugin.name}: {exc}") from None


def _conforms(value: Any, hint: Any) -> bool:
    """Whether ``value`` (parsed YAML) has the type ``hint``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, a) for a in args)
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin in (list, tuple):
        item = args[0] if args else Any
        return isinstance(value, list | tuple) and all(_conforms(v, item) for v in value)
    if origin is dict:
        item = args[1] if args else Any
        return isinstance(value, dict) and all(
            isinstance(k, str) and _conforms(v, item) for k, v in value.items())
    if hint is Any:
        return True
    return isinstance(value, hint)


def _type_name(hint: Any) -> str:
    """A readable name for a type hint, for error messages."""
    if typing.get_origin(hint) is None and hasattr(hint, "__name__"):
        return hint.__name__
    return str(hint).replace("typing.", "")


def describe_options(plugin: type[Plugin]) -> list[tuple[str, str, Any]]:
    """``[(name, type, default)]`` of a plugin's options, for ``cortex-manage plugins list``."""
    hints = typing.get_type_hints(plugin.Options)
    rows = []
    for f in dataclasses.fields(plugin.Options):
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        rows.append((f.name, _type_name(hints[f.name]), default))
    return rows


def host_facts(view: Any, key: tuple, hosts: Sequence[tuple[Any, Any]],
               fact: typing.Callable[[Any], Any]) -> list[Any]:
    """``fact(state)`` of each ``(candidate, host state)`` pair, computed once per view.

    ``fact`` must read the host's state alone; ``key`` names it with everything else it
    depends on (options, service). The answers are kept in the KnowledgeView ``view``
    (computed for every pair when ``view`` is None) and filled lazily, so a request
    pays only for hosts no earlier request of this view asked about.
    """
    if view is None:
        return [fact(state) for _, state in hosts]
    return _remembered(view.per_host(("host-facts", *key)), hosts,
                       lambda _candidate, state: fact(state))


def _remembered(known: dict, hosts: Sequence[tuple[Any, Any]],
                answer: typing.Callable[[Any, Any], Any]) -> list[Any]:
    """``answer(candidate, state)`` per pair, kept in ``known`` as ``{host: (state, value)}``.

    A kept value is reused only for the very same host state object (see
    ``KnowledgeView.per_host``); any other state is answered again and kept.
    """
    values = []
    for candidate, state in hosts:
        entry = known.get(candidate.host)
        if entry is not None and entry[0] is state:
            value = entry[1]
        else:
            value = answer(candidate, state)
            known[candidate.host] = (state, value)
        values.append(value)
    return values
