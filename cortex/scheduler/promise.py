"""The promise: the answer's room reserved for the call, a lone call's or a whole group's.

The pipeline ran on a view with the in-flight reservations of a moment ago laid over
it (:func:`cortex.knowledge.reservations.request_view`); a concurrent call (another
thread, worker or replica) may have promised the same capacity since. :func:`promise`
is the scheduler service's one step for it: a Nova create or move (a Kubernetes pod
where its call asks) is promised alone (:func:`promise_first`), or, as a member of a
group placed all or nothing, with its group (:func:`promise_group`). Each asks the
overlay one question per host (:func:`cortex.knowledge.reservations.recount`): are
the host's reservations still the ones the pipeline counted, and else what is its
state with them.

A lone call: :func:`promise_first` takes the answer's hosts in order and, for each,
holds the host's lock in the reservation store
(:meth:`cortex.store.reservations.ReservationStore.lock_host`), lays the host's current
reservations over its synced state, runs the pipeline's filters on it again
(:func:`cortex.pipeline.engine.refusal`) and writes a reservation only when it still
passes. When the reservations read under the lock are the very ones the request's view
counted on the host (no other call promised it meanwhile, the usual case), the state is
the one the pipeline just passed and the filters are not run again; they are whenever a
filter of the call failed and was skipped by its policy, since the re-check counts a
raising filter as a refusal (at 1,000 GPU hosts this took the re-check from 0.3-0.5 ms
to 0.1 ms of every create: the filters on one host, and the overlay built for them).
The store is then asked to write the reservation only if it finds those very
reservations under the lock (``reserve_if_unchanged``): one round trip on PostgreSQL
instead of a read and then a write; when it finds others, the host is re-checked under
its lock as above. A host that no longer passes is removed from the answer with the
failing filter's reason, exactly as if that filter had removed it; the first host that
passes is promised. So no two answers ever promise the same capacity, and the caller's
contract holds (only offered hosts, each once, ``[]`` only when every host was really
removed).

A group (:func:`promise_group`): at its first member's call every member's room is
planned and promised in one transaction, or none:

1. The plan (:func:`_plan`) walks the call's ranking once per member and takes the
   first host that passes the pipeline's filters (the capacity filters, GPU sets, NUMA
   fit, the fabric domain rules) with the members planned before it laid over the view
   as reservations of the group; a server group's policy is kept (``affinity``: every
   member on the first member's host; ``anti-affinity``: at most
   ``max_server_per_host`` members per host, counting those already there).
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
answered first, the rest of the ranking after it as Nova's alternates. When no slot's
host passes (or is offered), one slot is freed and the member is promised as a lone
call is. Slots no member takes expire with the reservations' time-to-live; a member
Nova places elsewhere stops counting once the synced view shows it
(:func:`cortex.knowledge.reservations.pending`). Counted in
``cortex_group_placements_total{service,outcome}`` (:func:`count_placement`): ``placed``,
``refused_whole``, and ``expired`` for a promise that expired with slots no member took,
counted by the worker whose next first call of a group deletes it (:func:`count_expired`).

Only new builds and moves are promised (``create``, ``resize``, ``live_migrate``,
``evacuate``): a rebuild stays on the instance's host. The promise adds the step
``inflight_reservations`` to the result; a store failure is logged and recorded as the
step's error, and the answer then stands unpromised, or the call fails
(:class:`PromiseFailed`) where the service's ``promise_failure_policy`` says ``fail``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any

from cortex.decision import HostWeights, StepResult
from cortex.ids import new_uuid
from cortex.knowledge.reservations import (
    Reservation,
    holds_on,
    recount,
    relaid,
    with_reservations,
)
from cortex.knowledge.view import KnowledgeView
from cortex.pipeline.config import Pipeline
from cortex.pipeline.engine import PipelineResult, refusal
from cortex.request import NovaRequest
from cortex.rules.device_choice import predict_claim
from cortex.rules.measures import group_members_on_host

LOG = logging.getLogger(__name__)
STEP = "inflight_reservations"
PROMISED_INTENTS = frozenset({"create", "resize", "live_migrate", "evacuate"})
#: Hosts tried for a promise per call. Each try is a short locked transaction; past
#: this many refusals (a burst of concurrent calls for the same few hosts) the answer
#: goes out with the untried hosts unpromised rather than make the caller wait, and
#: Placement's claim stays the last word, as without Cortex.
MAX_PROMISE_TRIES = 5
#: Plans made per first call of a group: a plan whose room a concurrent call took is
#: made again with the reservations stored now; past this many the group is refused whole.
MAX_PLANS = 5


class PromiseFailed(RuntimeError):
    """The promise could not be made (the store failed) and the call must fail (503)."""


def predicted_gpus(state: Any, request: Any) -> tuple[str, ...]:
    """PCI addresses of the GPUs nova-compute would hand the request on this host (model)."""
    if state.topology is None or not state.topology.gpus:
        return ()
    claim = predict_claim(state.topology, request)
    return tuple(claim.devices) if claim is not None else ()


def promises(request: Any) -> bool:
    """Whether a call of ``request`` is promised: a Nova create or move, a pod's bind.

    A Kubernetes pod is promised only where its call asks for it (the extender's bind,
    :mod:`cortex.services.kubernetes`); its filter and prioritize calls promise nothing.
    """
    return request.service in ("nova", "kubernetes") and request.intent in PROMISED_INTENTS


def promise(pipeline: Pipeline, request: Any, base: KnowledgeView, overlaid: KnowledgeView,
            result: PipelineResult, store: Any, ttl: float, now: datetime,
            metrics: Any = None, fail: bool = False) -> PipelineResult:
    """``result`` promised as :func:`promises` says: alone, or with its group; else as it is.

    ``base``: the synced view; ``overlaid``: the request's view (:func:`request_view`);
    ``store``: the reservation store; ``ttl``: seconds a promise counts; ``metrics``: a
    :class:`~cortex.scheduler.metrics.SchedulerMetrics` (None: not counted). ``fail``:
    raise :class:`PromiseFailed` when the store failed (else the answer stands
    unpromised, its step's status ``error``).
    """
    if not promises(request):
        return result
    result = promise_group(pipeline, request, base, overlaid, result, store, ttl, now,
                           metrics) or promise_first(pipeline, request, base, overlaid,
                                                     result, store, ttl, now)
    step = result.steps[-1]
    if fail and step.name == STEP and step.status == "error":
        raise PromiseFailed(step.reason)
    return result


def promise_first(pipeline: Pipeline, request: Any, base: KnowledgeView,
                  overlaid: KnowledgeView, result: PipelineResult, store: Any,
                  ttl: float, now: datetime) -> PipelineResult:
    """``result`` with its first host promised (reservation recorded) or removed.

    ``base`` is the synced view, ``overlaid`` the request's view with reservations;
    ``store`` has ReservationStore's ``lock_host``; ``ttl`` in seconds. Adds a step
    ``inflight_reservations`` to the result's steps. A store failure (database down) is
    logged and recorded as the step's error; the answer then stands unpromised.
    """
    started = time.perf_counter()
    removed: dict[str, str] = {}
    status, reason, detail = "ran", None, None
    unknown = frozenset(result.unknown_hosts)
    judged = (h for h in result.hosts if h in base.hosts and h not in unknown)
    cleanly = not any(s.kind == "filter" and s.status == "error" for s in result.steps)
    try:
        for tries, host in enumerate(judged):
            if tries == MAX_PROMISE_TRIES:
                detail = f"{tries} hosts refused; the rest answered unpromised"
                break
            made = (_promise_unchanged(request, base, overlaid, host, store, ttl, now)
                    if cleanly else None)
            if made is None:
                with store.lock_host(host, now) as held:
                    made, refused = _recheck(pipeline, request, base, overlaid, host,
                                             held.reservations, ttl, now, cleanly)
                    if made is not None:
                        held.reserve(made)
            if made is not None:
                detail = f"promised {host} until {made.expires_at.isoformat()} ({made.id})"
                break
            removed[host] = refused
    except Exception as exc:  # noqa: BLE001 - database trouble must not fail the answer
        LOG.warning("in-flight reservation failed, answer not promised: %r", exc)
        status, reason = "error", repr(exc)
    step = StepResult(STEP, "filter", status, (time.perf_counter() - started) * 1000, reason,
                      hosts_in=len(result.hosts), removed=removed, detail=detail)
    if not removed:  # the common case: the answer stands as it is
        return dataclasses.replace(result, steps=[*result.steps, step])
    hosts = [h for h in result.hosts if h not in removed]
    final = result.weights
    kept = [(h, w) for h, w in zip(final.names, final.values_in_order, strict=True)
            if h not in removed]
    weights = HostWeights([h for h, _ in kept], [w for _, w in kept])
    return dataclasses.replace(result, hosts=hosts, steps=[*result.steps, step],
                               weights=weights)


def _promise_unchanged(request: Any, base: KnowledgeView, overlaid: KnowledgeView,
                       host: str, store: Any, ttl: float, now: datetime) -> Reservation | None:
    """The reservation written on ``host`` when its reservations are still those counted.

    ``overlaid`` counted the pending ones of the reservations it lists on ``host``;
    when the store finds exactly those under the host's lock, the host is in the state
    the pipeline passed, and the reservation is written in the same step
    (``reserve_if_unchanged``: one round trip on PostgreSQL, where the read under the
    lock and then the write take two). None, nothing written, when the store found
    others, or when ``overlaid`` cannot tell what it counted (a hold or a commitment of
    the call's own among them): the caller then re-checks under the lock.
    """
    own = request.instance_uuid
    seen = recount(base, overlaid, host, own, now)
    if not seen.same:
        return None
    made = _reservation(request, host, seen.state, ttl, now)
    return made if store.reserve_if_unchanged(made, now, seen.expected, own) else None


def _reservation(request: Any, host: str, state: Any, ttl: float,
                 now: datetime) -> Reservation:
    """The reservation of ``request`` on ``host`` (in ``state``) from ``now`` for ``ttl`` s."""
    return Reservation(new_uuid(), host, request.instance_uuid, request.network.group_id,
                       MappingProxyType(dict(request.resources)),
                       predicted_gpus(state, request), now, now + timedelta(seconds=ttl))


def _recheck(pipeline: Pipeline, request: Any, base: KnowledgeView, overlaid: KnowledgeView,
             host: str, current: list[Reservation], ttl: float, now: datetime,
             cleanly: bool = False) -> tuple[Reservation | None, str]:
    """``(the reservation, "")`` when ``host`` passes the filters with ``current``.

    Else ``(None, the failing filter and its reason)``. The request's own earlier
    reservation (Nova asking again for the same instance) does not count, nor do other
    hosts' (a store may hand them all). ``cleanly``: no filter of the call failed, so a
    host whose reservations are the ones ``overlaid`` counted passes as it did there.
    """
    seen = recount(base, overlaid, host, request.instance_uuid, now, current, cleanly)
    if not (cleanly and seen.same):
        reason = refusal(pipeline, request, seen.view or overlaid, host)
        if reason is not None:
            return None, reason
    return _reservation(request, host, seen.state, ttl, now), ""


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


def group_store(store: Any) -> Any:
    """The group promises kept beside reservation store ``store``; None where it has none.

    A :class:`~cortex.store.reservations.ReservationStore` (PostgreSQL, SQLite) has
    them; the in-memory store of the simulator does not, and its groups are promised
    member by member.
    """
    groups = getattr(store, "groups", None)
    return groups() if callable(groups) else None


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


def count_placement(metrics: Any, service: str, outcome: str) -> None:
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
            count_placement(metrics, group.service, "expired")
    return expired


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

    ``current``: the reservations read under the locks; None keeps ``overlaid``'s. The
    commitments' holds ``overlaid`` counts stay counted (the store holds none of them).
    """
    hosts = {m.host for m in members} | {r.host for r in current or ()}
    hosts &= base.hosts.keys()
    listed = list(overlaid.reservations) if current is None else [
        *(r for r in overlaid.reservations if r.host not in hosts), *current,
        *holds_on(overlaid, hosts)]
    return relaid(overlaid, base, listed, hosts, own, now, members)


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
                promised = held.promise(request.service, gang.members, gang.min_count,
                                        members)
        if held.made is not None:
            count_placement(metrics, request.service, "placed")
            first = members[0].host
            hosts = [first, *(h for h in result.hosts if h != first)]
            return _answer(result, hosts, StepResult(
                STEP, "filter", "ran", _ms(started), hosts_in=len(result.hosts),
                detail=_detail("promised group", promised)))
        if held.existing is not None:
            return _later(pipeline, request, base, overlaid, result, groups, held.existing,
                          now, started)
        # another call took room on these hosts: plan again with what is stored
        overlaid = _fresh(overlaid, base, groups, request, now)
    count_placement(metrics, request.service, "refused_whole")
    where = " in one NVLink clique" if gang.one_clique else ""
    reason = (f"group {gang.key}: {len(members)} of {gang.members} members fit{where} "
              f"(min_count {gang.min_count}); none promised")
    return _answer(result, [], StepResult(
        STEP, "filter", "ran", _ms(started), hosts_in=len(result.hosts),
        removed=dict.fromkeys(result.hosts, reason), detail=reason))


def _fresh(overlaid: KnowledgeView, base: KnowledgeView, groups: Any,
           request: Any, now: datetime) -> KnowledgeView:
    """``base`` with every reservation the store holds now (read from its table).

    And the commitments' holds ``overlaid`` counts, which the store does not hold.
    """
    return with_reservations(base, [*groups.reservations(now), *holds_on(overlaid)], now,
                             request.instance_uuid)


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
        # the slot left out: its room is the member's own, and the fabric rules count it
        # as the member to come, not as a sibling already placed
        view = relaid(overlaid, base, [r for r in overlaid.reservations if r.id != slot.id],
                      (slot.host,), own, now)
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


def _detail(what: str, group: Any) -> str:
    """The step's detail: what was done, and the group's promise as JSON."""
    return f"{what}: {json.dumps(group.as_dict(), sort_keys=True)}"
