"""The scheduling decision: what was asked, what every step did, what was answered.

One typed record of a call, frozen: the scheduler service makes it
(:mod:`cortex.scheduler.service`), the decision log stores and reads it back
(:mod:`cortex.store.decisions`), and the explanation, the dashboard and
``cortex-manage`` read it (:mod:`cortex.pipeline.explain`). Its JSON forms:

- the **document** (:meth:`Decision.as_document`, ``GET /v1/decisions/<id>``): every
  step with its removals, each weigher's ``raw`` and ``scaled`` value per host, the
  final weight of every judged host;
- the **stored record** (:meth:`Decision.as_record`, the ``record`` column): the same
  with per-host values as lists in one host order (``weighed``), without the scaled
  values and final weights, which follow from the rest (format
  :data:`COMPACT_FORMAT`). A 1,000-host call's document is about 300 kB, its record a
  third of that. Records written before that format are read as they were stored.

The combination rule, compatible with the reference implementation, is computed in
one place (:func:`final_weights`)::

    final(host) = tanh(caller weight) + sum(multiplier * tanh(raw weight))

A pipeline may weigh as Nova does instead (``weighing: nova``, :data:`WEIGHINGS`): each
weigher's raw weights are clamped to its bounds and normalised over the judged hosts
(Nova's ``nova.weights.normalize``), and the caller's weight is not counted::

    final(host) = sum(multiplier * (raw - min) / (max - min))
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from itertools import repeat
from types import MappingProxyType
from typing import Any

import numpy as np

EMPTY: Mapping[str, Any] = MappingProxyType({})
#: ``record["format"]`` of a stored record in the compact form.
COMPACT_FORMAT = 2
#: Outcomes of a decision.
OUTCOMES = ("ok", "rejected", "error", "simulated")
#: How weighers' raw weights become a final weight: Cortex's (tanh, the caller's weight
#: counted) or Nova's (min-max normalisation over the judged hosts, no caller weight).
WEIGHINGS = ("cortex", "nova")


class HostWeights(Mapping[str, float]):
    """``{host: weight}``, read-only, over two aligned columns: ``names`` and ``values``.

    ``names`` are distinct host names, ``values[i]`` the weight of ``names[i]``; both are
    kept as given (tuples, or lists no one changes). Iterating gives the names in their
    order; the first lookup by name builds the name index. A call's decision holds its
    caller weights and final weights so: at 10,000 hosts a dict of them costs ~0.6 ms
    to build, and the call itself never looks a weight up by name.
    """

    __slots__ = ("names", "values_in_order", "_index")

    def __init__(self, names: Sequence[str], values: Sequence[float]) -> None:
        if len(names) != len(values):
            raise ValueError(f"{len(values)} weights for {len(names)} hosts")
        self.names, self.values_in_order = names, values
        self._index: dict[str, float] | None = None

    def __getitem__(self, name: str) -> float:
        if self._index is None:
            self._index = dict(zip(self.names, self.values_in_order, strict=True))
        return self._index[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def __repr__(self) -> str:
        return f"HostWeights({dict(zip(self.names, self.values_in_order, strict=True))!r})"


def in_order(weights: Mapping[str, float], hosts: Sequence[str]) -> list[float] | None:
    """``weights`` of ``hosts`` as a list in their order, when that is cheap; else None.

    Cheap: a :class:`HostWeights` over these very ``hosts``, or a map whose keys are
    ``hosts`` in order (its values then follow them).
    """
    if isinstance(weights, HostWeights):
        if weights.names is hosts or weights.names == hosts:
            return list(weights.values_in_order)
        return None
    if len(weights) == len(hosts) and all(map(operator.eq, weights, hosts)):
        return list(weights.values())
    return None


def nova_normalize(values: Sequence[float], lower: float | None = None,
                   upper: float | None = None) -> list[float]:
    """Nova's weighing of one weigher's raw weights: clamped, then normalised to 0..1.

    ``nova/weights.py``: ``BaseWeigher.weigh_objects`` clamps each weight to the
    weigher's ``minval``/``maxval`` (``lower``/``upper``; None: no bound), and
    ``normalize`` maps ``[minval or min, maxval or max]`` onto ``[0, 1]``; all equal
    values become 0.
    """
    if lower is not None:
        values = [max(v, lower) for v in values]
    if upper is not None:
        values = [min(v, upper) for v in values]
    if not values:
        return []
    low = float(min(values) if lower is None else lower)
    high = float(max(values) if upper is None else upper)
    if low == high:
        return [0.0] * len(values)
    span = high - low
    return [(v - low) / span for v in values]


def final_weights(caller_weights: Sequence[float], weighers: Iterable[StepResult],
                  weighing: str = "cortex") -> list[float]:
    """The final weight of each judged host, in order (:data:`WEIGHINGS`).

    ``cortex``: ``tanh(caller weight) + sum(multiplier * tanh(raw))``; ``nova``:
    ``sum(multiplier * normalised raw)``, each weigher's values normalised by
    :func:`nova_normalize` within its bounds (``StepResult.normalize``).
    ``caller_weights`` are the judged hosts' caller weights in the weighers' host order
    (``weighed``); ``weighers`` the weigher steps that ran, in pipeline order, each with
    its ``values`` in that order. The terms are added step by step, so the floats are
    the same wherever the sum is made (the engine, a stored record read back).
    """
    return final_weight_array(caller_weights, list(weighers), weighing).tolist()


def final_weight_array(caller_weights: Sequence[float] | np.ndarray,
                       weighers: Sequence[StepResult], weighing: str = "cortex",
                       tanh: Sequence[np.ndarray | None] | None = None) -> np.ndarray:
    """:func:`final_weights` as a numpy array (float64), for the engine's ranking.

    The tanh is the standard library's (numpy's may differ in the last bit); the
    products and the step-by-step sums are single IEEE operations either way, so the
    floats are those of the same sum made one host at a time: at 10,000 judged hosts
    and six weighers, 3 ms instead of 6 ms. ``tanh``, when given, holds per weigher
    (same order) ``math.tanh`` of its values already taken, or None (the engine keeps
    them with a step's kept answers). ValueError when a step's values are not one per
    caller weight.
    """
    count = len(caller_weights)
    sums = np.fromiter(map(math.tanh, caller_weights), float, count) \
        if weighing == "cortex" else np.zeros(count)
    for step, taken in zip(weighers, tanh or [None] * len(weighers), strict=True):
        values = step.values or ()
        if len(values) != count:
            raise ValueError(f"{step.name}: {len(values)} values for {count} hosts")
        if step.normalize is None:
            if taken is None:
                taken = np.fromiter(map(math.tanh, values), float, count)
            terms = taken * step.factor  # multiplier * tanh(raw), as StepResult.terms
        else:
            terms = np.fromiter(step.terms(), float, count)
        sums += terms  # total + this step's term
    return sums


@dataclass(frozen=True, slots=True)
class StepResult:
    """What one step of a pipeline did: ``status`` ``ran``, ``skipped`` or ``error``.

    Filters: ``removed`` maps host -> reason (``shadow`` steps fill it without removing).
    Weighers: ``values``, the raw weight of each host of ``weighed`` in its order (the
    judged hosts every weigher of the call saw); :attr:`raw` and :attr:`scaled` give them
    per host. ``reason``: why it was skipped or failed; ``detail``: what the plugin
    decided for the whole request (one line). ``duration_ms`` in milliseconds.
    ``normalize``: None for Cortex's weighing (a term is ``multiplier * tanh(raw)``), the
    weigher's ``(minval, maxval)`` for Nova's (``multiplier * normalised raw``,
    :func:`nova_normalize`).
    """

    name: str
    kind: str
    status: str
    duration_ms: float = 0.0
    reason: str | None = None
    shadow: bool = False
    multiplier: float | None = None
    hosts_in: int = 0
    removed: Mapping[str, str] = field(default_factory=lambda: EMPTY)
    detail: str | None = None
    weighed: Sequence[str] | None = field(default=None, repr=False)
    values: Sequence[float] | None = None
    normalize: tuple[float | None, float | None] | None = None

    @property
    def weighs(self) -> bool:
        """Whether this is a weigher step that ran (its values count in the final weights)."""
        return self.kind == "weigher" and self.status == "ran" and self.values is not None

    @property
    def factor(self) -> float:
        """The multiplier a weigher's values count with (1 when none was recorded)."""
        return 1.0 if self.multiplier is None else self.multiplier

    @property
    def raw(self) -> dict[str, float]:
        """``{host: raw weight}`` of a weigher that ran; ``{}`` otherwise."""
        if not self.values:
            return {}
        return dict(zip(self.weighed or (), self.values, strict=True))

    def terms(self) -> list[float]:
        """This step's term of each final weight, in ``weighed`` order.

        ``multiplier * tanh(raw)``, or with ``normalize`` ``multiplier *`` Nova's
        normalised raw weight (:func:`nova_normalize`).
        """
        values = self.values or ()
        if self.normalize is None:
            normalised: Iterable[float] = map(math.tanh, values)
        else:
            normalised = nova_normalize(values, *self.normalize)
        return list(map(float(self.factor).__mul__, normalised))

    @property
    def scaled(self) -> dict[str, float]:
        """``{host: term}``: this step's term of each final weight (:meth:`terms`)."""
        if not self.values:
            return {}
        return dict(zip(self.weighed or (), self.terms(), strict=True))

    def _fields(self) -> dict[str, Any]:
        """The fields of both JSON forms, empty details left out."""
        fields = {"name": self.name, "kind": self.kind, "status": self.status,
                  "duration_ms": self.duration_ms, "reason": self.reason,
                  "shadow": self.shadow, "multiplier": self.multiplier,
                  "hosts_in": self.hosts_in, "removed": dict(self.removed),
                  "detail": self.detail,
                  "normalize": None if self.normalize is None else list(self.normalize)}
        return {k: v for k, v in fields.items() if v not in ({}, None)}

    def as_dict(self) -> dict[str, Any]:
        """The document form: ``raw`` and ``scaled`` per host, empty details left out."""
        document = self._fields()
        if self.values:
            document.update(raw=self.raw, scaled=self.scaled)
        return document

    def as_stored(self) -> dict[str, Any]:
        """The stored form: ``raw`` a list in ``weighed`` order, no ``scaled``."""
        document = self._fields()
        if self.values:
            document["raw"] = list(self.values)
        return document

    @classmethod
    def from_stored(cls, document: Mapping[str, Any], weighed: Sequence[str] = ()
                    ) -> StepResult:
        """A step of either JSON form; a list ``raw`` is in ``weighed``'s order.

        Raises KeyError/TypeError/ValueError for a document that is not a step.
        """
        raw = document.get("raw")
        if isinstance(raw, Mapping):
            hosts, values = tuple(raw), tuple(raw.values())
        elif raw:
            hosts, values = tuple(weighed), tuple(raw)
            if len(hosts) != len(values):
                raise ValueError(f"step {document['name']}: {len(values)} values for "
                                 f"{len(hosts)} hosts")
        else:
            hosts, values = None, None
        removed = document.get("removed") or {}
        if not isinstance(removed, Mapping):
            raise TypeError(f"step {document['name']}: removed is not a map")
        bounds = document.get("normalize")
        if bounds is not None:
            lower, upper = bounds  # two numbers or nulls, else the record is damaged
            bounds = (None if lower is None else _number(lower),
                      None if upper is None else _number(upper))
        return cls(str(document["name"]), document.get("kind", "filter"),
                   document.get("status", "ran"), document.get("duration_ms", 0.0),
                   document.get("reason"), bool(document.get("shadow", False)),
                   document.get("multiplier"), document.get("hosts_in", 0),
                   MappingProxyType(dict(removed)), document.get("detail"), hosts, values,
                   bounds)


#: Causes of an empty answer that are not a step's name: every candidate unknown to
#: Cortex (dropped by ``unknown_host_policy = drop``), and no candidate at all.
UNKNOWN_HOSTS = "unknown_hosts"
NO_CANDIDATES = "no_candidates"


def last_removal(steps: Sequence[StepResult]) -> StepResult | None:
    """The last filter step that ran, is not a shadow and removed hosts (None: none did)."""
    return next((s for s in reversed(steps) if s.kind == "filter" and s.status == "ran"
                 and not s.shadow and s.removed), None)


def refusal_step(steps: Sequence[StepResult], offered: int) -> str:
    """The cause of an empty answer from its steps alone: the step that removed the last hosts.

    ``steps``: the pipeline's step results; ``offered``: the candidates the caller sent.
    The name of :func:`last_removal`, else :data:`UNKNOWN_HOSTS` when there were
    candidates and :data:`NO_CANDIDATES` when there were none. The live counter
    (``cortex_scheduler_no_valid_host_total``, :mod:`cortex.scheduler.refusals`) starts
    from the same step and, holding the knowledge view, also names ``commitments`` or
    ``reservations`` where the room laid over the synced view is what removed a host;
    a stored decision keeps the step's name then.
    """
    step = last_removal(steps)
    if step is None:
        return UNKNOWN_HOSTS if offered else NO_CANDIDATES
    return step.name


@dataclass(frozen=True)
class Decision:
    """One scheduling call, as recorded.

    The call: ``service``, the caller's ids, the ``intent``, the candidates ``hosts`` in
    the caller's order with their caller ``weights``. The run: the ``pipeline``, its
    ``steps`` (:class:`StepResult`), ``weighed`` (the judged hosts in the weighers' order)
    and the ``final_weights`` of the hosts still judged at the end. The answer:
    ``result`` (best first; None when the call got no ranking), the ``unknown_hosts``,
    ``status`` (the HTTP status answered), ``detail`` (why not 200) and ``outcome``
    (:data:`OUTCOMES`). ``knowledge_version``: the view it was judged on. Identity and
    timing: ``id``, ``created_at`` (UTC), ``duration_ms``, ``api_request_id`` (Cortex's
    own ``req-`` id). A simulation carries ``simulated`` and the ``overrides`` it ran
    with. ``damaged`` says why a stored record could not be read whole (its steps and
    weights are then left out). ``weighing``: how the final weights were summed
    (:data:`WEIGHINGS`, the pipeline's). ``demand``: what a live GPU create asked for and
    where it went (:func:`cortex.scheduler.demand.gpu_demand`), None for other calls.
    ``pipeline_choice``: how the pipeline was chosen where the request alone did not
    decide it (:attr:`cortex.pipeline.choice.Choice.record`: the offered hosts' hypervisor
    family followed against Nova's ``vmware`` flag,
    ``{"followed": "hosts", "vmware_flag": bool, "hosts": "kvm"|"vmware"}``); None when
    the request decided (a named pipeline, the flavor, the flag). ``cause``: why a call
    that found no host found none, where the scheduler named it with the knowledge view
    it decided on (:mod:`cortex.scheduler.refusals`: ``commitments`` and ``reservations``
    besides the steps' names); None: :attr:`refusal` reads it from the steps.
    """

    service: str
    hosts: tuple[str, ...] = ()
    weights: Mapping[str, float] = field(default_factory=lambda: EMPTY)
    request_id: str | None = None
    global_request_id: str | None = None
    resource_id: str | None = None
    intent: str | None = None
    pipeline: str | None = None
    result: tuple[str, ...] | None = None
    unknown_hosts: tuple[str, ...] = ()
    steps: tuple[StepResult, ...] = ()
    weighed: tuple[str, ...] = ()
    final_weights: Mapping[str, float] = field(default_factory=lambda: EMPTY)
    knowledge_version: int | None = None
    status: int | None = None
    detail: str | None = None
    outcome: str | None = None
    id: str | None = None
    created_at: datetime | None = None
    duration_ms: float | None = None
    api_request_id: str | None = None
    simulated: bool = False
    overrides: Mapping[str, Any] | None = None
    damaged: str | None = None
    weighing: str = "cortex"
    demand: Mapping[str, Any] | None = None
    pipeline_choice: Mapping[str, Any] | None = None
    cause: str | None = None

    @property
    def weighers(self) -> tuple[StepResult, ...]:
        """The weigher steps that ran and gave values, in pipeline order."""
        return tuple(s for s in self.steps if s.weighs)

    @property
    def refusal(self) -> str | None:
        """Why the call found no host: ``cause``, else :func:`refusal_step`; None if it found one.

        Only a call answered with status 200 and an empty ``result`` is a refusal (what
        Nova turns into NoValidHost); a rejected or failed call has no cause.
        """
        if self.status != 200 or self.result is None or self.result:
            return None
        return self.cause or refusal_step(self.steps, len(self.hosts))

    # -- the caller's view ---------------------------------------------------------------

    def caller_first(self) -> str | None:
        """The caller's own first choice: its highest weight, ties to its earlier host."""
        if not self.hosts:
            return None
        weights = in_order(self.weights, self.hosts)
        if weights is None:
            weights = list(map(self.weights.get, self.hosts, repeat(0.0)))
        # index() finds the first of equal weights: the caller's earlier host wins a tie
        return self.hosts[weights.index(max(weights))]

    def first_choice(self) -> str | None:
        """``kept`` when the answer starts with the caller's first choice, else ``changed``.

        None when the call has no answer (rejected or failed). An empty answer changes it.
        """
        if self.result is None or not self.hosts:
            return None
        return "kept" if self.result[:1] == (self.caller_first(),) else "changed"

    # -- JSON forms ----------------------------------------------------------------------

    def _call(self, weights: dict[str, float] | list[float] | None = None) -> dict[str, Any]:
        """The call's fields shared by both JSON forms (``weights``: default, as a map)."""
        fields: dict[str, Any] = {"service": self.service}
        if self.simulated:
            fields.update(simulated=True, overrides=self.overrides or {})
        fields.update(request_id=self.request_id, global_request_id=self.global_request_id,
                      resource_id=self.resource_id, intent=self.intent,
                      hosts=list(self.hosts),
                      weights=dict(self.weights) if weights is None else weights)
        if self.pipeline is not None:
            fields["pipeline"] = self.pipeline
        if self.pipeline_choice is not None:
            fields["pipeline_choice"] = dict(self.pipeline_choice)
        if self.weighing != "cortex":
            fields["weighing"] = self.weighing
        if self.demand is not None:
            fields["demand"] = dict(self.demand)
        return fields

    def _outcome(self) -> dict[str, Any]:
        """The answer's status fields."""
        return {"status": self.status, "detail": self.detail,
                "api_request_id": self.api_request_id}

    def as_record(self) -> dict[str, Any]:
        """The stored record (the ``record`` column; see the module docstring)."""
        # a map, unless the weights follow the hosts' order (then a list)
        record = self._call(None if self.result is None else in_order(self.weights, self.hosts))
        if self.result is not None:
            record.update(result=list(self.result), unknown_hosts=list(self.unknown_hosts),
                          knowledge_version=self.knowledge_version, format=COMPACT_FORMAT,
                          weighed=list(self.weighed),
                          steps=[s.as_stored() for s in self.steps])
        return record | self._outcome()

    def as_document(self) -> dict[str, Any]:
        """The API document: the call, every step whole, final weights, identity and timing."""
        document = self._call()
        if self.result is not None:
            document.update(result=list(self.result), unknown_hosts=list(self.unknown_hosts),
                            knowledge_version=self.knowledge_version,
                            steps=[s.as_dict() for s in self.steps],
                            final_weights=dict(self.final_weights))
        elif self.damaged:
            document["steps"] = []
        document |= self._outcome()
        if self.damaged:
            document["damaged"] = self.damaged
        return document | {
            "id": self.id,
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "outcome": self.outcome, "duration_ms": self.duration_ms}

    def as_row(self) -> dict[str, Any]:
        """The ``decisions`` table row: the indexed columns and the stored record.

        ``cause``: :attr:`refusal` (None unless the call found no host).
        """
        return {"id": self.id, "created_at": self.created_at, "service": self.service,
                "pipeline": self.pipeline, "request_id": self.request_id,
                "global_request_id": self.global_request_id, "resource_id": self.resource_id,
                "intent": self.intent, "outcome": self.outcome, "duration_ms": self.duration_ms,
                "cause": self.refusal, "record": self.as_record()}

    @classmethod
    def from_record(cls, record: Mapping[str, Any], **columns: Any) -> Decision:
        """The decision of a stored record (either form) and its table ``columns``.

        The columns (``id``, ``created_at``, ``service``, ``pipeline``, ...) win over the
        record's copies (``cause``: the stored :attr:`refusal`).
        Raises KeyError/TypeError/ValueError/AttributeError for a record that cannot be
        read whole (:func:`damaged_decision` makes what can be shown of it).
        """
        hosts = tuple(_strings(record.get("hosts") or ()))
        weights = record.get("weights") or {}
        if isinstance(weights, list):
            weights = dict(zip(hosts, weights, strict=True))
        weights = {str(h): _number(w) for h, w in weights.items()}
        weighed = tuple(_strings(record.get("weighed") or ()))
        steps = tuple(StepResult.from_stored(s, weighed) for s in record.get("steps") or ())
        result = record.get("result")
        found = cls(
            service=record.get("service", ""), hosts=hosts, weights=MappingProxyType(weights),
            request_id=record.get("request_id"),
            global_request_id=record.get("global_request_id"),
            resource_id=record.get("resource_id"), intent=record.get("intent"),
            pipeline=record.get("pipeline"),
            result=None if result is None else tuple(_strings(result)),
            unknown_hosts=tuple(_strings(record.get("unknown_hosts") or ())), steps=steps,
            weighed=weighed, knowledge_version=record.get("knowledge_version"),
            status=record.get("status"), detail=record.get("detail"),
            api_request_id=record.get("api_request_id"),
            simulated=bool(record.get("simulated")), overrides=record.get("overrides"),
            weighing=_weighing(record.get("weighing", "cortex")),
            demand=_mapping(record.get("demand"), "demand"),
            pipeline_choice=_mapping(record.get("pipeline_choice"), "pipeline_choice"))
        if record.get("format") == COMPACT_FORMAT:
            finals = judged_weights(found)
        else:
            finals = {str(h): _number(w) for h, w in (record.get("final_weights") or {}).items()}
        return replace(found, final_weights=MappingProxyType(finals), **_present(columns))

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> Decision:
        """The decision of an API document (:meth:`as_document`, either record form).

        Raises as :meth:`from_record` does.
        """
        created = document.get("created_at")
        return cls.from_record(
            document, id=document.get("id"), outcome=document.get("outcome"),
            duration_ms=document.get("duration_ms"),
            created_at=datetime.fromisoformat(created) if isinstance(created, str) else created)


def _mapping(value: Any, key: str) -> Mapping[str, Any] | None:
    """A record's object at ``key`` (read-only), None when absent; TypeError when not a map."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TypeError(f"{key} is not an object")
    return MappingProxyType(dict(value))


def _weighing(value: Any) -> str:
    """A record's ``weighing``; ValueError for one not in :data:`WEIGHINGS`."""
    if value not in WEIGHINGS:
        raise ValueError(f"weighing {value!r} is not one of {', '.join(WEIGHINGS)}")
    return value


def judged_weights(decision: Decision) -> dict[str, float]:
    """``{host: final weight}`` of the hosts still judged at the end of ``decision``.

    The sum (:func:`final_weights`) over ``weighed``; hosts a filter removed after the
    weighers (the in-flight reservation's re-check) are left out.
    """
    sums = final_weights([decision.weights[h] for h in decision.weighed], decision.weighers,
                         decision.weighing)
    gone = {host for step in decision.steps if step.kind == "filter" and not step.shadow
            for host in step.removed}
    return {h: total for h, total in zip(decision.weighed, sums, strict=True) if h not in gone}


def damaged_decision(record: Any, error: Exception, **columns: Any) -> Decision:
    """What can be shown of a stored record that cannot be read whole.

    Its lists of host names (``hosts``, ``result``, ``unknown_hosts``) when they are lists
    of str, and ``status``, ``detail``, ``api_request_id``, ``knowledge_version``;
    no steps nor weights, and ``damaged`` says why.
    """
    record = record if isinstance(record, Mapping) else {}

    def names(key: str) -> tuple[str, ...] | None:
        value = record.get(key)
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return tuple(value) if ok else None

    def scalar(key: str) -> Any:
        value = record.get(key)
        ok = isinstance(value, str | int) and not isinstance(value, bool)
        return value if ok else None

    return replace(Decision(
        service=str(columns.get("service") or ""), hosts=names("hosts") or (),
        result=names("result"), unknown_hosts=names("unknown_hosts") or (),
        knowledge_version=scalar("knowledge_version"), status=scalar("status"),
        detail=scalar("detail"), api_request_id=scalar("api_request_id"),
        damaged=f"the stored record cannot be read whole ({type(error).__name__}); steps "
                "and weights left out"), **_present(columns))


def _present(columns: Mapping[str, Any]) -> dict[str, Any]:
    """The column values that are not None."""
    return {k: v for k, v in columns.items() if v is not None}


def _strings(values: Iterable[Any]) -> list[str]:
    """``values`` when every one is a str; TypeError otherwise."""
    found = list(values)
    if not all(isinstance(v, str) for v in found):
        raise TypeError("host names must be strings")
    return found


def _number(value: Any) -> float:
    """A finite number (an int or float, not a bool); TypeError otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TypeError(f"{value!r} is not a finite number")
    return value
