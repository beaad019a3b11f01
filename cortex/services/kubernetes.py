"""The kube-scheduler extender's work: judge a pod on the offered nodes, bind it.

The HTTP side (:mod:`cortex.api.kubernetes`) parses kube-scheduler's arguments and
answers; this service does what lies between, as kube-scheduler's extender protocol
(``pkg/scheduler/extender.go``) expects it:

- :meth:`Extender.judge` (filter, prioritize): the offered nodes' labels join the
  knowledge (:func:`cortex.store.kubernetes.remember_labels`); each node is judged on
  what no other pod's leaving would change (:func:`cortex.rules.pod_fit.node_refusals`,
  the unresolvable ones); the pod then goes through the ``kubernetes`` pipeline over
  the nodes left as a call that promises nothing and is no GPU demand (:data:`JUDGE`).
- :meth:`Extender.bind`: the pod (remembered from its filter call, else read from the
  API server) judged on the chosen node once more, promised there (:data:`BIND`), and
  its Binding created through :class:`cortex.kubernetes.client.KubernetesApi`. A
  Binding refused with 409 for a pod the API server shows on that very node already
  (a bind retried after its answer was lost) is a success. GPU demand is recorded once
  per pod, with the decision of its first bind (:func:`cortex.store.kubernetes.placement_id`).
- A pod of a pod group (the ``scheduling.x-k8s.io/pod-group`` label; its size the
  ``pod-group-size`` annotation, else its PodGroup's ``minMember``, read once per worker
  from the API server) is promised at filter and prioritize too
  (:func:`cortex.scheduler.groups.holding`): the first member's call holds the whole
  group's room or fails every node with the reason; a later member's promised node
  comes first and weighs the most.
- :func:`scaled_scores`: prioritize's whole scores 0..10 from the final weights.

Each worker keeps the newest :data:`KEPT` pods seen by filter (for their bind) and the
placement ids whose demand it recorded, in the :class:`Extender` it builds at start.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from cortex import log
from cortex.decision import Decision
from cortex.knowledge.loader import KUBERNETES
from cortex.kubernetes.client import NO_API_SERVER, KubernetesApi, KubernetesError
from cortex.request.base import BadRequest
from cortex.request.devices import DeviceCatalog
from cortex.request.kubernetes import POD_GROUP_LABELS, PodCall, to_request
from cortex.rules.pod_fit import node_refusals
from cortex.scheduler.groups import holding
from cortex.scheduler.service import RunOptions, SchedulerService, SchedulingFailed
from cortex.store.kubernetes import placement_id, placement_recorded, remember_labels

__all__ = ["BIND", "JUDGE", "KEPT", "MAX_PRIORITY", "BindRefused", "Extender", "Judgement",
           "KubernetesError", "SchedulingFailed", "scaled_scores"]

LOG = logging.getLogger(__name__)
#: kube-scheduler's MaxExtenderPriority (extender/v1/types.go).
MAX_PRIORITY = 10
#: Per worker, how many pods (by UID) and recorded placement ids are remembered.
KEPT = 4096
#: Filter and prioritize: judged and recorded, never promised, no GPU demand.
JUDGE = RunOptions(promise=False, demand=False)
#: Bind: judged and promised; the decision recorded once the Binding is made or refused.
BIND = RunOptions(hold=True)


class BindRefused(RuntimeError):
    """The chosen node cannot hold the pod, whatever else leaves it (``rules.pod_fit``)."""


@dataclass(frozen=True)
class Judgement:
    """What the extender made of one filter or prioritize call.

    ``decision``: the pipeline's run over the nodes left (None when no node was left or
    the pod cannot be a request); ``failed``: the nodes a pipeline step removed, with
    its reason; ``unresolvable``: the nodes refused before the pipeline, with theirs.
    """

    decision: Decision | None
    failed: dict[str, str]
    unresolvable: dict[str, str]


class _Kept:
    """The newest :data:`KEPT` keys with their values, shared by a worker's threads."""

    def __init__(self) -> None:
        self._items: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> Any:
        """The value kept for ``key``, or None."""
        with self._lock:
            return self._items.get(key)

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return key in self._items

    def keep(self, key: str, value: Any) -> bool:
        """Keep ``key`` as the newest entry; whether it was not there before."""
        with self._lock:
            new = key not in self._items
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > KEPT:
                self._items.popitem(last=False)
        return new


def pod_name(pod: Mapping[str, Any]) -> str:
    """``namespace/name`` of a Pod object, for logs."""
    metadata = pod.get("metadata") or {}
    return f"{metadata.get('namespace', 'default')}/{metadata.get('name', '')}"


class Extender:
    """One worker's extender: the scheduler, the knowledge, the store and the API server.

    ``engine``: the database (labels and recorded placements); ``api``: the API server
    binds go to; ``learn_labels``: ``[kubernetes] nodes_from_reports`` (only then do
    node labels join the knowledge).
    """

    def __init__(self, scheduler: SchedulerService, engine: Engine, api: KubernetesApi,
                 devices: DeviceCatalog | None, learn_labels: bool) -> None:
        self.scheduler = scheduler
        self.engine = engine
        self.api = api
        self.devices = devices
        self.learn_labels = learn_labels
        self._pods = _Kept()
        self._placed = _Kept()
        self._groups = _Kept()

    def _remember_labels(self, call: PodCall, request_id: str | None) -> None:
        """Store the labels of offered nodes whose labels the knowledge does not hold yet.

        Only nodes the knowledge has (reports of nodes Nova does not know, with
        ``[kubernetes] nodes_from_reports``); one short transaction when any changed,
        nothing otherwise. A failure is logged: the call goes on with the labels sent.
        """
        if not call.nodes or not self.learn_labels:
            return
        hosts = self.scheduler.knowledge.view().hosts
        changed = {}
        for name, node in call.nodes.items():
            labels = dict(((node.get("metadata") or {}).get("labels")) or {})
            state = hosts.get(name)
            if state is not None and state.all_nodes[0].hypervisor_type == KUBERNETES \
                    and dict(state.labels) != labels:
                changed[name] = labels
        if not changed:
            return
        try:
            with self.engine.begin() as connection:
                remember_labels(connection, changed, datetime.now(UTC))
        except SQLAlchemyError as exc:
            LOG.warning("kubernetes extender: node labels not stored: %s (request_id=%s)",
                        type(exc).__name__, request_id)

    def judge(self, call: PodCall, request_id: str | None) -> Judgement:
        """The call judged: the nodes' refusals (:mod:`cortex.rules.pod_fit`), then the pipeline.

        A pod that cannot be a request fails every offered node (``unresolvable``) with
        the reason. Raises SchedulingFailed when the scheduler cannot answer,
        KnowledgeUnavailable when no view may be served.
        """
        self._remember_labels(call, request_id)
        try:
            unresolvable = node_refusals(call, self.scheduler.knowledge.view())
            admitted = PodCall(call.pod, tuple(n for n in call.node_names
                                               if n not in unresolvable),
                               call.nodes, call.by_name)
            request = to_request(admitted, self.devices, self._min_member(call.pod, request_id))
        except BadRequest as exc:
            LOG.info("kubernetes extender: pod %s fails every node: %s (request_id=%s)",
                     pod_name(call.pod), exc, request_id)
            return Judgement(None, {}, dict.fromkeys(call.node_names, str(exc)))
        if call.uid:  # a pod that is a request: its bind may come
            self._pods.keep(call.uid, call.pod)
        if not admitted.node_names:
            return Judgement(None, {}, unresolvable)
        log.bind_caller(request.request_id, None)
        decision = self.scheduler.schedule(request, holding(request, JUDGE),
                                           time.perf_counter(), request_id)
        failed: dict[str, str] = {}
        passing = set(decision.result or ())  # a pod group's promised node may come back
        for step in decision.steps:
            for host, reason in (step.removed or {}).items():
                if host not in passing:
                    failed.setdefault(host, f"{step.name}: {reason}")
        for name in admitted.node_names:
            if name not in passing:
                failed.setdefault(name, "not chosen by the pipeline")
        return Judgement(decision, failed, unresolvable)

    def bind(self, namespace: str, name: str, uid: str, node: str,
             request_id: str | None) -> None:
        """Promise ``node`` to the pod and create its Binding; its decision recorded.

        Raises KubernetesError (no API server, the pod unreadable, the Binding refused),
        BindRefused (the node cannot hold the pod), SchedulingFailed (409: the node no
        longer fits; or the scheduler cannot answer), KnowledgeUnavailable.
        """
        if not self.api.url:  # nothing promised that could not be bound
            raise KubernetesError(NO_API_SERVER)
        pod = self._pods.get(uid) or self.api.read_pod(namespace, name)
        call = PodCall(pod, (node,), {}, True)
        refused = node_refusals(call, self.scheduler.knowledge.view()).get(node)
        if refused is not None:
            raise BindRefused(f"node {node} cannot hold the pod: {refused}")
        request = to_request(call, self.devices, self._min_member(pod, request_id))
        decision = self.scheduler.schedule(request, BIND, time.perf_counter(), request_id)
        if not decision.result:
            self.scheduler.record(replace(decision, demand=None))
            removed = [f"{s.name}: {r}" for s in decision.steps
                       for h, r in (s.removed or {}).items() if h == node]
            raise SchedulingFailed(409, f"node {node} no longer fits the pod"
                                        f"{': ' + removed[0] if removed else ''}", None,
                                   decision)
        try:
            self.api.bind(namespace, name, uid, node)
        except KubernetesError as exc:
            bound = self.api.bound_node(namespace, name) if exc.status == 409 else None
            if bound != node:
                self.scheduler.record(replace(decision, demand=None))
                if bound:
                    raise KubernetesError(f"{exc}; pod {namespace}/{name} is bound to node "
                                          f"{bound}", exc.status) from None
                raise
        self._record_placement(decision, uid, request_id)

    def _min_member(self, pod: Mapping[str, Any], request_id: str | None) -> int | None:
        """The ``minMember`` of the pod's PodGroup, read once per worker from the API server.

        None without an API server, for a pod of no group, or when it cannot be read
        (logged: the ``pod-group-size`` annotation alone sizes the group then).
        """
        metadata = pod.get("metadata") or {}
        labels = metadata.get("labels") or {}
        group = next((labels[k] for k in POD_GROUP_LABELS if labels.get(k)), None)
        if not group or not self.api.url:
            return None
        key = f"{metadata.get('namespace') or 'default'}/{group}"
        if key in self._groups:
            return self._groups.get(key)
        try:
            found = self.api.read_pod_group_min_member(*key.split("/", 1))
        except KubernetesError as exc:
            if exc.status != 404:  # none there: the annotation sizes the group
                LOG.warning("kubernetes extender: PodGroup %s unreadable: %s (request_id=%s)",
                            key, exc, request_id)
                return None
            found = None
        self._groups.keep(key, found)
        return found

    def _record_placement(self, decision: Decision, uid: str, request_id: str | None) -> None:
        """Record the decision of a bound pod: its demand the first time, none after.

        The first time the decision takes the pod's :func:`placement_id`; a pod this
        worker recorded, or whose demand the database holds (another worker's, a worker
        before a restart), is recorded without demand under the decision's own id. A
        database that cannot say counts as not recorded: a second record under the
        placement id would be refused by its primary key (logged by the decision
        writer), never counted twice.
        """
        placement = placement_id(uid)
        if decision.demand is not None and self._first_placement(placement, request_id):
            self.scheduler.record(replace(decision, id=placement))
        else:
            self.scheduler.record(replace(decision, demand=None))

    def _first_placement(self, placement: str, request_id: str | None) -> bool:
        """Whether the placement ``placement`` is recorded by no one yet; from now on it is."""
        if placement in self._placed:
            return False
        try:
            with self.engine.connect() as connection:
                recorded = placement_recorded(connection, placement)
        except SQLAlchemyError as exc:
            LOG.warning("kubernetes extender: recorded placements unreadable: %s "
                        "(request_id=%s)", type(exc).__name__, request_id)
            recorded = False
        return self._placed.keep(placement, None) and not recorded


def scaled_scores(hosts: list[str], weights: Mapping[str, float]) -> dict[str, int]:
    """Whole scores 0..:data:`MAX_PRIORITY` of ``hosts`` (best first) from final weights.

    Min-max over the hosts: the best scores 10, the worst passing host 0 when the
    weights differ; all 10 when they are equal; a host without a weight (unknown to
    Cortex, kept at the end) 0.
    """
    known = [weights[h] for h in hosts if h in weights]
    if not known:
        return dict.fromkeys(hosts, 0)
    low, high = min(known), max(known)
    return {h: (MAX_PRIORITY if high == low else
                int(math.floor(MAX_PRIORITY * (weights[h] - low) / (high - low) + 0.5)))
            if h in weights else 0 for h in hosts}
