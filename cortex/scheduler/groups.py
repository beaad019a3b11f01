"""Groups all or nothing: a gang's every member placed at its first member's call, or none.

A distributed job is useless until its last member runs, and a half-placed one holds
GPUs nobody else can use. So when a call is the first of a group (:func:`gang_of`: a
Nova multi-create, ``num_instances > 1`` with its request id; a ``group_size`` hint
with a ``group_id`` hint; a Kubernetes pod group), :func:`promise_group` decides where
every member goes and promises all of their room in one transaction:

1. The plan (:func:`_plan`) walks the call's ranking once per member and takes the
   first host that passes the pipeline's filters (:func:`cortex.pipeline.engine.refusal`:
   the capacity filters, GPU sets, NUMA fit, the fabric domain rules) with the members
   planned before it laid over the view as reservations of the group; a server group's
   policy is kept (``affinity``: every member on the first member's host;
   ``anti-affinity``: at most ``max_server_per_host`` members per host, counting those
   already there).
2. Fewer than ``min_count`` members fit: the call is answered ``[]`` (Nova's
   NoValidHost) and nothing is promised.
3. Else the plan is re-checked under the locks of the group and of every host it names
   (:meth:`cortex.store.group_promises.GroupPromiseStore.lock`) with the reservations
   found there, and the group's promise and every member's reservation are written in
   that transaction; when a concurrent call took the room meanwhile, the plan is made
   again with what the store holds now (at most :data:`MAX_PLANS` times, then the group
   is refused as in 2).

A later member's call finds the group's promise and takes a slot not taken yet: the
slot's host is re-checked by the filters with that slot's own room left out and
answered first, the rest of the ranking after it as Nova's alternates. When no
slot's host passes (or is offered), one slot is freed and the member is promised as a
lone call is (:mod:`cortex.scheduler.promise`). Slots no member takes expire with the
reservations' time-to-live; a member Nova places elsewhere stops counting once the
synced view shows it (:func:`cortex.knowledge.reservations.pending`).

Counted in ``cortex_group_placements_total{service,outcome}``: ``placed``,
``refused_whole``, and ``expired`` for a promise that expired with slots no member took,
counted by the worker whose next first call of a group deletes it
(:func:`count_expired`). The decision record carries
the promise in the ``inflight_reservations`` step's ``detail``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections import ChainMap
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any

from cortex.decision import HostWeights, StepResult
from cortex.ids import new_uuid
from cortex.knowledge.reservations import (
    Reservation,
    others_on,
    pending,
    reserve_host,
    with_reservations,
)
from cortex.knowledge.view import KnowledgeView
from cortex.pipeline.config import Pipeline
from cortex.pipeline.engine import PipelineResult, refusal
from cortex.request import NovaRequest
from cortex.rules.measures import group_members_on_host
from cortex.scheduler.promise import STEP, predicted_gpus

LOG = logging.getLogger(__name__)
#: Plans made per first call: a plan whose room a concurrent call took is made again
#: with the reservations stored now; past this many the group is refused whole.
MAX_PLANS = 5
#: The most members one group may ask for (a bound on the plan's work).
MAX_MEMBERS = 1000


@dataclass(frozen=True)
class Gang:
    """A group placed all or nothing: ``key`` names it, ``members`` asked, ``min_count``.

    ``policy``: the server group's (``affinity``, ``anti-affinity``) or None;
    ``max_per_host``: members an anti-affinity group may put on one host;
    ``one_clique``: every member inside one NVLink clique (:func:`clique_of`).
    """

    key: str
    members: int
    min_count: int
    policy: str | None = None
    max_per_host: int = 1
    one_clique: bool = False


def _hint_int(hints: Any, name: str) -> int | None:
    """A positive integer scheduler hint (None when absent or not a number)."""
    values = hints.get(name) or ()
    text = values[0].strip() if values else ""
    return int(text) if text.isdigit() and int(text) > 0 else None


def gang_of(request: Any) -> Gang | None:
    """The group ``request`` is a member of and must be placed whole, None for a lone call.

    A Nova create that is one of a multi-create (``num_instances > 1``; key
    ``request:<global or own request id>``, which every member's call carries), or that
    names its group by the ``group_size`` hint with the ``group_id`` hint or a server
    group (key ``hint:<project>/<group_id or server group uuid>``; a Kubernetes pod
    group is one: its label and its ``pod-group-size`` annotation or PodGroup
    ``minMember``: :mod:`cortex.request.kubernetes`). ``min_count``: the scheduler hint
    ``min_count`` (a pod group's ``minMember``; Nova's bodies carry none), else every
    member; bounded to ``1..members``. The ``nvlink_clique`` hint binds the group to one
    NVLink clique.
    """
    if not isinstance(request, NovaRequest) or request.intent != "create":
        return None
    hints = request.scheduler_hints
    if request.num_instances > 1 and (request.global_request_id or request.request_id):
        key, members = (f"request:{request.global_request_id or request.request_id}",
                        request.num_instances)
    elif request.network.group_size > 1 and (hints.get("group_id") or request.server_group):
        key, members = (f"hint:{request.project_id or ''}/{request.network.group_id}",
                        request.network.group_size)
    else:
        return None
    members = min(members, MAX_MEMBERS)
    wanted = _hint_int(hints, "min_count")
    group = request.server_group
    policy = group.policy if group is not None and group.policy in (
        "affinity", "anti-affinity") else None
    per_host = 1
    if group is not None:
        try:
            per_host = max(1, int(group.rules.get("max_server_per_host", 1)))
        except (TypeError, ValueError):
            per_host = 1
    return Gang(key, members, min(members, wanted or members), policy, per_host,
                request.network.one_clique)


def holding(request: Any, options: Any) -> Any:
    """``options`` (a :class:`~cortex.scheduler.service.RunOptions`) for a judging call.

    A pod of a group is promised at its filter and prioritize calls (the group's room
    held whole at the first member's, or every node failed; a later member's promised
    node answered first), where a lone pod is promised only at its bind.
    """
    return dataclasses.replace(options, promise=True) if gang_of(request) else options


def group_store(store: Any) -> Any:
    """The group promises kept beside reservation store ``store``; None where it has none.

    A :class:`~cortex.store.reservations.ReservationStore` (PostgreSQL, SQLite) has
    them; the in-memory store of the simulator does not, and its groups are promised
    member by member.
    """
    groups = getattr(store, "groups", None)
    return groups() if callable(groups) else None


def group_promises(store: Any, now: datetime) -> list[dict[str, Any]]:
    """The group promises unexpired at ``now`` beside ``store``, oldest first, as JSON.

    Empty for a store without group promises. Raises as the store does.
    """
    groups = group_store(store)
    return [] if groups is None else [g.as_dict() for g in groups.active(now)]


def promise_group(pipeline: Pipeline, request: Any, base: KnowledgeView,
                  overlaid: KnowledgeView, result: PipelineResult, store: Any, ttl: float,
                  now: datetime, metrics: Any = None) -> PipelineResult | None:
    """``result`` answered as a member of its group, None when the lone promise applies.

    ``base``/``overlaid``/``store``/``ttl``/``now`` as
    :func:`cortex.scheduler.promise.promise_first`; ``metrics`` a
    :class:`~cortex.scheduler.metrics.SchedulerMetrics` (None: not counted). None for
    a call of no group, a store without group promises, or a later member whose slot
    could not be used (one slot freed): the caller then promises it alone. Adds the
    ``inflight_reservations`` step; a store failure is logged and recorded as the
    step's error (the answer then stands unpromised, as ``promise_first``'s does).
    """
    gang = gang_of(request)
    groups = group_store(store) if gang is not None else None
    if gang is None or groups is None:
        return None
    started = time.perf_counter()
    try:
        existing, slots = groups.find_with_slots(gang.key, now)
        if existing is None:
            count_expired(groups, now, metrics)
            return _first(pipeline, request, base, overlaid, result, groups, gang, ttl, now,
                          started, metrics)
        return _later(pipeline, request, base, overlaid, result, groups, existing, now,
                      started, slots)
    except Exception as exc:  # noqa: BLE001 - database trouble must not fail the answer
        LOG.warning("group promise failed, answer not promised: %r", exc)
        return _answer(result, result.hosts, StepResult(
            STEP, "filter", "error", _ms(started), repr(exc), hosts_in=len(result.hosts)),
            promised=False)


def _ms(started: float) -> float:
    """Milliseconds since ``started`` (a ``time.perf_counter()`` value)."""
    return (time.perf_counter() - started) * 1000


def _answer(result: PipelineResult, hosts: list[str], step: StepResult,
            promised: bool = True) -> PipelineResult:
    """``result`` answering ``hosts`` (in this order) with ``step`` added.

    ``promised``: the first host is promised, and then also weighs the most (a caller
    that ranks by the weights, the Kubernetes extender's prioritize, prefers it too):
    one more than the best other's when it did not already.
    """
    final = result.weights
    kept = dict(zip(final.names, final.values_in_order, strict=True))
    ordered = [h for h in hosts if h in kept]
    values = [kept[h] for h in ordered]
    lead = hosts[0] if promised and hosts and hosts[0] not in result.unknown_hosts else None
    if lead is not None and lead not in kept:  # a filter of the call removed it
        ordered, values = [lead, *ordered], [max(values, default=0.0) + 1.0, *values]
    elif len(values) > 1 and ordered[0] == lead and max(values[1:]) >= values[0]:
        values[0] = max(values[1:]) + 1.0
    if ordered == list(final.names) and values == list(final.values_in_order):
        return dataclasses.replace(result, hosts=list(hosts), steps=[*result.steps, step])
    return dataclasses.replace(result, hosts=list(hosts), steps=[*result.steps, step],
                               weights=HostWeights(ordered, values))


def _judged(result: PipelineResult, base: KnowledgeView) -> list[str]:
    """The answer's hosts the view knows, best first."""
    unknown = frozenset(result.unknown_hosts)
    return [h for h in result.hosts if h in base.hosts and h not in unknown]


def _with(overlaid: KnowledgeView, base: KnowledgeView, current: list[Reservation] | None,
          members: list[Reservation], own: str | None, now: datetime) -> KnowledgeView:
    """``overlaid`` with ``members`` laid over their hosts (and ``current`` there, if given).

    ``current``: the reservations read under the locks; None keeps ``overlaid``'s.
    """
    hosts = {m.host for m in members} | {r.host for r in current or ()}
    hosts &= base.hosts.keys()
    listed = list(overlaid.reservations) if current is None else [
        *(r for r in overlaid.reservations if r.host not in hosts), *current]
    changed = {}
    for host in hosts:
        counted = pending(others_on(listed, host, own), base, now)
        changed[host] = reserve_host(base.hosts[host], [*counted, *(m for m in members
                                                                     if m.host == host)])
    return dataclasses.replace(
        overlaid, hosts=MappingProxyType(ChainMap(changed, overlaid.hosts)),  # type: ignore[arg-type]
        reservations=(*listed, *members), base=overlaid,
        overlaid=overlaid.overlaid | changed.keys())


def _plan(pipeline: Pipeline, request: Any, base: KnowledgeView, view: KnowledgeView,
          ranking: list[str], gang: Gang, current: list[Reservation] | None, ttl: float,
          now: datetime) -> list[Reservation]:
    """The members' reservations, in member order: as many as fit, at most ``gang.members``.

    Each member takes the first host of ``ranking`` that passes the pipeline's filters
    with the members before it counted (and the server group's policy allows). A host
    refused once is not tried again: members only take room.
    """
    members: list[Reservation] = []
    group = request.server_group
    refused: set[str] = set()
    # a later member is no instance yet: the rules count every member planned as a sibling
    later = dataclasses.replace(request, instance_uuid=None)
    for index in range(gang.members):
        asking = request if index == 0 else later
        planned = _with(view, base, current, members, request.instance_uuid, now) \
            if members or current is not None else view
        for host in ranking:
            if host in refused:
                continue
            if gang.policy == "affinity" and members and host != members[0].host:
                continue
            if gang.policy == "anti-affinity" and group is not None:
                here = sum(1 for m in members if m.host == host)
                if here + group_members_on_host(base.hosts[host], group) >= gang.max_per_host:
                    continue
            if refusal(pipeline, asking, planned, host) is not None:
                refused.add(host)  # it only fills as members are added
                continue
            state = planned.hosts[host]
            members.append(Reservation(
                new_uuid(), host, request.instance_uuid if index == 0 else None,
                request.network.group_id, MappingProxyType(dict(request.resources)),
                predicted_gpus(state, request), now, now + timedelta(seconds=ttl)))
            break
        else:
            break
    return members


#: The Kubernetes node label of a node's multi-node NVLink clique, as NVIDIA's GPU
#: feature discovery sets it (``<cluster uuid>.<clique id>``).
CLIQUE_LABEL = "nvidia.com/gpu.clique"


def clique_of(view: KnowledgeView, host: str) -> str | None:
    """The multi-node NVLink domain of ``host``; None when it is in none.

    A Kubernetes node's :data:`CLIQUE_LABEL`, else the host's NVL block in the fabric
    (``topology:block`` aggregate metadata, the topology file or Prometheus:
    :mod:`cortex.knowledge.network`).
    """
    state = view.hosts.get(host)
    label = state.labels.get(CLIQUE_LABEL) if state is not None else None
    if label:
        return str(label)
    location = view.network.locations.get(host)
    return location.block if location is not None else None


def _rankings(base: KnowledgeView, ranking: list[str], gang: Gang) -> list[list[str]]:
    """The rankings a plan may walk: the whole one, or one per NVLink clique.

    For a group bound to one clique, each clique's hosts in ``ranking``'s order, the
    clique of the best host first; hosts in no clique are left out.
    """
    if not gang.one_clique:
        return [ranking]
    cliques: dict[str, list[str]] = {}
    for host in ranking:
        clique = clique_of(base, host)
        if clique is not None:
            cliques.setdefault(clique, []).append(host)
    return list(cliques.values())


def _best_plan(pipeline: Pipeline, request: Any, base: KnowledgeView, view: KnowledgeView,
               rankings: list[list[str]], gang: Gang, ttl: float,
               now: datetime) -> list[Reservation]:
    """The first ranking's plan that reaches ``min_count``, else the largest plan found."""
    best: list[Reservation] = []
    for ranking in rankings:
        members = _plan(pipeline, request, base, view, ranking, gang, None, ttl, now)
        if len(members) >= gang.min_count:
            return members
        best = max(best, members, key=len)
    return best


def _first(pipeline: Pipeline, request: Any, base: KnowledgeView, overlaid: KnowledgeView,
           result: PipelineResult, groups: Any, gang: Gang, ttl: float,
           now: datetime, started: float, metrics: Any) -> PipelineResult | None:
    """The first member's call: plan, re-check under the locks, promise all or refuse."""
    rankings = _rankings(base, _judged(result, base), gang)
    members: list[Reservation] = []
    for _ in range(MAX_PLANS):
        members = _best_plan(pipeline, request, base, overlaid, rankings, gang, ttl, now)
        if len(members) < gang.min_count:
            break
        with groups.lock(gang.key, {m.host for m in members}, now) as held:
            if held.existing is not None:  # a sibling's call promised the group meanwhile
                break
            again = _plan(pipeline, request, base, overlaid,
                          list(dict.fromkeys(m.host for m in members)), gang,
                          held.reservations, ttl, now)
            if [m.host for m in again] == [m.host for m in members]:
                promise = held.promise(request.service, gang.members, gang.min_count,
                                       members)
        if held.made is not None:
            _count(metrics, request.service, "placed")
            first = members[0].host
            hosts = [first, *(h for h in result.hosts if h != first)]
            return _answer(result, hosts, StepResult(
                STEP, "filter", "ran", _ms(started), hosts_in=len(result.hosts),
                detail=_detail("promised group", promise)))
        if held.existing is not None:
            return _later(pipeline, request, base, overlaid, result, groups, held.existing,
                          now, started)
        # another call took room on these hosts: plan again with what is stored
        overlaid = _fresh(overlaid, base, groups, request, now)
    _count(metrics, request.service, "refused_whole")
    where = " in one NVLink clique" if gang.one_clique else ""
    reason = (f"group {gang.key}: {len(members)} of {gang.members} members fit{where} "
              f"(min_count {gang.min_count}); none promised")
    return _answer(result, [], StepResult(
        STEP, "filter", "ran", _ms(started), hosts_in=len(result.hosts),
        removed=dict.fromkeys(result.hosts, reason), detail=reason))


def _fresh(overlaid: KnowledgeView, base: KnowledgeView, groups: Any,
           request: Any, now: datetime) -> KnowledgeView:
    """``base`` with every reservation the store holds now (read from its table)."""
    return with_reservations(base, groups.reservations(now), now, request.instance_uuid)


def _later(pipeline: Pipeline, request: Any, base: KnowledgeView, overlaid: KnowledgeView,
           result: PipelineResult, groups: Any, group: Any,
           now: datetime, started: float,
           slots: list[Reservation] | None = None) -> PipelineResult | None:
    """A later member's call: its promised host first, re-checked by the filters.

    ``slots``: the group's reservations when the caller read them with the promise.
    """
    slots = groups.slots(group, now) if slots is None else slots
    own = request.instance_uuid
    mine = next((s for s in slots if own and s.instance_uuid == own), None)
    offered = set(request.candidates.hosts)
    free = [s for s in slots if s.instance_uuid is None]
    choices = [mine] if mine is not None else free
    for slot in choices:
        if slot.host not in offered or slot.host not in base.hosts:
            continue
        view = _without(overlaid, base, slot, own, now)
        reason = refusal(pipeline, request, view, slot.host)
        if reason is not None:
            continue
        claimed = slot if mine is not None else groups.claim(group, slot.id, own, now)
        if claimed is None:
            continue
        hosts = [slot.host, *(h for h in result.hosts if h != slot.host)]
        return _answer(result, hosts, StepResult(
            STEP, "filter", "ran", _ms(started), hosts_in=len(result.hosts),
            detail=_detail(f"member of group on {slot.host} ({claimed.id})", group)))
    if mine is None and free:
        groups.release(group, free[-1].id)
    return None


def _without(overlaid: KnowledgeView, base: KnowledgeView, slot: Reservation, own: str | None,
             now: datetime) -> KnowledgeView:
    """``overlaid`` with ``slot`` left out: its room is the member's own.

    Left out of its host's state and of the view's reservations, so that the fabric
    rules count it as the member to come, not as a sibling already placed.
    """
    others = [r for r in others_on(overlaid.reservations, slot.host, own) if r.id != slot.id]
    state = reserve_host(base.hosts[slot.host], pending(others, base, now))
    return dataclasses.replace(
        overlaid, hosts=MappingProxyType(ChainMap({slot.host: state}, overlaid.hosts)),  # type: ignore[arg-type]
        reservations=tuple(r for r in overlaid.reservations if r.id != slot.id),
        base=overlaid, overlaid=overlaid.overlaid | {slot.host})


def _detail(what: str, group: Any) -> str:
    """The step's detail: what was done, and the group's promise as JSON."""
    return f"{what}: {json.dumps(group.as_dict(), sort_keys=True)}"


def _count(metrics: Any, service: str, outcome: str) -> None:
    """One group placement of ``outcome`` in ``cortex_group_placements_total``."""
    if metrics is not None:
        metrics.group_placements.labels(service, outcome).inc()


def count_expired(groups: Any, now: datetime, metrics: Any = None) -> int:
    """Delete the group promises expired at ``now`` and count those members left unclaimed.

    A promise counts as ``expired`` in ``cortex_group_placements_total`` when some of its
    slots were never taken by a member. Returns how many such promises were pruned.
    """
    expired = 0
    for group, unclaimed in groups.prune(now):
        if unclaimed:
            expired += 1
            _count(metrics, group.service, "expired")
    return expired
