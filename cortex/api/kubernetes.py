"""The kube-scheduler extender: ``/scheduler/kubernetes/{filter,prioritize,bind}``.

kube-scheduler (``pkg/scheduler/extender.go``) POSTs JSON to ``urlPrefix/verb`` and takes
any status but 200 as an error; its types (``k8s.io/kube-scheduler/extender/v1``) have no
JSON tags, so keys are read case-insensitively and answered in the Go field names
(:mod:`cortex.request.kubernetes`), then checked against the OpenAPI document's
``ExtenderArgs`` and ``ExtenderBindingArgs``. Every answer names only nodes it was
offered, each once:

- Node objects' labels join the knowledge: those that differ from what it holds are
  stored (:mod:`cortex.store.kubernetes`), so the next view gives the node its labels
  and its zone (``topology.kubernetes.io/zone``).
- ``filter``: ``ExtenderArgs`` -> ``ExtenderFilterResult``. First each offered node is
  judged on what no other pod's leaving would change
  (:func:`cortex.rules.pod_fit.node_refusals`); those that fail are in
  ``FailedAndUnresolvableNodes``, which kube-scheduler's preemption does not try
  (``schedule_one.go`` ``findNodesThatPassExtenders`` marks them
  UnschedulableAndUnresolvable; a node in both maps counts as unresolvable). Then the
  pod goes through the ``kubernetes`` service's pipeline (chosen as Nova's are) over
  the nodes left, as a call that promises nothing and is no GPU demand; a node a
  pipeline step removed is in ``FailedNodes`` with the step's reason (preemption could
  free room). Passing nodes come back as ``Nodes`` (a NodeList of the objects sent) or,
  with ``nodeCacheCapable``, ``NodeNames``.
- A pod that cannot be a request (:func:`cortex.request.kubernetes.pod_spec`: an
  annotation outside the values it takes, named with them; a fraction of a GPU) fails
  every offered node in ``FailedAndUnresolvableNodes`` with that reason, and the call
  answers 200: the arguments were well formed, and a non-200 answer is the extender's
  own failure to kube-scheduler, which then fails the pod unless ``ignorable`` is set
  (and with it, schedules it without Cortex).
- ``prioritize``: the same run's final weights scaled to whole scores 0..10
  (``MaxExtenderPriority``), best 10; nodes that failed score 0, and every node of a
  pod that cannot be a request.
- ``bind``: ``ExtenderBindingArgs`` -> ``ExtenderBindingResult``. The pod (remembered
  from its filter call, else read from the API server) is judged on the chosen node
  once more and promised there with the GPUs nova-compute's model would hand it, as a
  Nova create is promised (the in-flight reservations: its pod group's later members
  see it); then the Binding is created through the API server (``[kubernetes]
  api_url``). A Binding the API server refuses with 409 for a pod it shows on that very
  node already (a bind retried after its answer was lost) is a success.
- GPU demand (``gpu_demand``, the forecasts' input) is recorded once per pod, when it is
  bound: with the bind's decision, whose id is the pod's
  (:func:`cortex.store.kubernetes.placement_id`, by UID); a bind of a pod whose demand
  is recorded already records its decision without. Filter and prioritize are asked
  again in every scheduling cycle of a pod, so they record decisions, never demand. A
  pod kube-scheduler binds itself (no ``bindVerb``) is not counted.

A body that is not extender arguments gets 400 with a JSON error. A failure inside
(the knowledge or the database unavailable, the API server refusing the binding)
answers 200 with ``Error`` set, so kube-scheduler falls back as its ``ignorable``
setting says.
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

from flask import current_app, g, jsonify
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from cortex.api.body import read_json_body
from cortex.api.errors import ApiError
from cortex.decision import Decision
from cortex.knowledge.loader import KUBERNETES
from cortex.request.base import BadRequest
from cortex.request.kubernetes import PodCall, canonical, parse_args, to_request
from cortex.rules.pod_fit import node_refusals
from cortex.scheduler.service import RunOptions, SchedulingFailed
from cortex.store.kubernetes import placement_id, placement_recorded, remember_labels

LOG = logging.getLogger(__name__)
#: kube-scheduler's MaxExtenderPriority (extender/v1/types.go).
MAX_PRIORITY = 10
#: Per worker, the newest :data:`_KEPT` of each: pods remembered from their filter calls
#: for their bind, by UID; the placement ids of the pods whose demand was recorded.
_PODS: OrderedDict[str, Mapping[str, Any]] = OrderedDict()
_PLACED: OrderedDict[str, None] = OrderedDict()
_LOCK = threading.Lock()
_KEPT = 4096
#: Filter and prioritize: judged and recorded, never promised, no GPU demand.
JUDGE = RunOptions(promise=False, demand=False)
#: Bind: judged and promised; the decision recorded once the Binding is made or refused.
BIND = RunOptions(hold=True)


def _keep(kept: OrderedDict, key: str, value: Any) -> bool:
    """Put ``key`` in ``kept`` as its newest entry; whether it was not there before.

    The oldest entries go past :data:`_KEPT`.
    """
    with _LOCK:
        new = key not in kept
        kept[key] = value
        kept.move_to_end(key)
        while len(kept) > _KEPT:
            kept.popitem(last=False)
    return new


def _remember(call: PodCall) -> None:
    """Keep the pod for its bind."""
    if call.uid:
        _keep(_PODS, call.uid, call.pod)


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


def _arguments(schema: str) -> dict[str, Any]:
    """The call's JSON body, keys in the Go field names, checked against ``schema``.

    ApiError 415/400 as for every endpoint; 400 naming what the schema refuses.
    """
    body = canonical(read_json_body())
    errors = current_app.extensions["cortex"].validator.extender_errors(schema, body)
    if errors:
        raise ApiError(400, "; ".join(errors))
    return body


def _call() -> PodCall:
    """The filter or prioritize call's arguments; ApiError 400 when malformed."""
    try:
        return parse_args(_arguments("ExtenderArgs"))
    except BadRequest as exc:
        raise ApiError(400, str(exc)) from None


def _learn_labels(call: PodCall) -> None:
    """Store the labels of offered nodes whose labels the knowledge does not hold yet.

    Only nodes the knowledge has (reports of nodes Nova does not know, with ``[kubernetes]
    nodes_from_reports``); one short transaction when any changed, nothing otherwise. A
    failure is logged: the call goes on with the labels it was sent.
    """
    services = current_app.extensions["cortex"]
    if not call.nodes or not services.conf.get("kubernetes", "nodes_from_reports"):
        return
    hosts = services.knowledge.view().hosts
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
        with services.engine.begin() as connection:
            remember_labels(connection, changed, datetime.now(UTC))
    except SQLAlchemyError as exc:
        LOG.warning("kubernetes extender: node labels not stored: %s (request_id=%s)",
                    type(exc).__name__, g.get("request_id"))


def _judge(call: PodCall) -> Judgement:
    """The call judged: the nodes' refusals (:mod:`cortex.rules.pod_fit`), then the pipeline.

    A pod that cannot be a request fails every offered node (``unresolvable``) with the
    reason. Raises SchedulingFailed when the scheduler cannot answer, KnowledgeUnavailable
    when no view may be served.
    """
    services = current_app.extensions["cortex"]
    _learn_labels(call)
    try:
        unresolvable = node_refusals(call, services.knowledge.view())
        admitted = PodCall(call.pod, tuple(n for n in call.node_names if n not in unresolvable),
                           call.nodes, call.by_name)
        request = to_request(admitted, services.devices)
    except BadRequest as exc:
        LOG.info("kubernetes extender: pod %s fails every node: %s (request_id=%s)",
                 _pod_name(call.pod), exc, g.get("request_id"))
        return Judgement(None, {}, dict.fromkeys(call.node_names, str(exc)))
    _remember(call)  # a pod that is a request: its bind may come
    if not admitted.node_names:
        return Judgement(None, {}, unresolvable)
    g.caller_ids = (request.request_id, None)
    decision = services.scheduler.schedule(request, JUDGE, time.perf_counter(),
                                           g.get("request_id"))
    failed: dict[str, str] = {}
    for step in decision.steps:
        for host, reason in (step.removed or {}).items():
            failed.setdefault(host, f"{step.name}: {reason}")
    passing = set(decision.result or ())
    for name in admitted.node_names:
        if name not in passing:
            failed.setdefault(name, "not chosen by the pipeline")
    return Judgement(decision, failed, unresolvable)


def _pod_name(pod: Mapping[str, Any]) -> str:
    """``namespace/name`` of a Pod object, for logs."""
    metadata = pod.get("metadata") or {}
    return f"{metadata.get('namespace', 'default')}/{metadata.get('name', '')}"


def _error(answer: dict[str, Any], exc: Exception) -> Any:
    """``answer`` with ``Error`` set for a failure inside; logged with the request id."""
    message = exc.detail if isinstance(exc, SchedulingFailed) else f"{type(exc).__name__}: {exc}"
    LOG.warning("kubernetes extender: %s (request_id=%s)", message, g.get("request_id"))
    answer["Error"] = message[:500]
    return jsonify(answer)


def filter_nodes():
    """``POST /scheduler/kubernetes/filter``: ``ExtenderFilterResult`` (module doc)."""
    call = _call()
    empty = {"Nodes": None, "NodeNames": None, "FailedNodes": {},
             "FailedAndUnresolvableNodes": {}, "Error": ""}
    try:
        judged = _judge(call)
    except Exception as exc:  # noqa: BLE001 - kube-scheduler decides by its ignorable setting
        return _error(empty, exc)
    failed, unresolvable = judged.failed, judged.unresolvable
    passing = [n for n in call.node_names if n not in failed and n not in unresolvable]
    answer = dict(empty, FailedNodes=failed, FailedAndUnresolvableNodes=unresolvable)
    if call.by_name:
        answer["NodeNames"] = passing
    else:
        answer["Nodes"] = {"apiVersion": "v1", "kind": "NodeList", "metadata": {},
                           "items": [call.nodes[n] for n in passing]}
    return jsonify(answer)


def prioritize_nodes():
    """``POST /scheduler/kubernetes/prioritize``: ``HostPriorityList``, scores 0..10."""
    call = _call()
    try:
        judged = _judge(call)
    except Exception as exc:  # noqa: BLE001 - a prioritize error is ignored by kube-scheduler
        LOG.warning("kubernetes extender: prioritize failed: %s (request_id=%s)", exc,
                    g.get("request_id"))
        judged = Judgement(None, {}, {})
    decision = judged.decision
    scores = {} if decision is None else scaled_scores(
        [h for h in decision.result or () if h not in judged.failed], decision.final_weights)
    return jsonify([{"Host": n, "Score": scores.get(n, 0)} for n in call.node_names])


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


def bind_pod():
    """``POST /scheduler/kubernetes/bind``: promise the node, bind the pod (module doc)."""
    services = current_app.extensions["cortex"]
    args = _arguments("ExtenderBindingArgs")
    namespace, name, uid, node = (args[k] for k in ("PodNamespace", "PodName", "PodUID", "Node"))
    try:
        if not services.kubernetes.url:  # nothing promised that could not be bound
            raise KubernetesError("no Kubernetes API server: set [kubernetes] api_url to bind")
        pod = _PODS.get(uid) or services.kubernetes.read_pod(namespace, name)
        call = PodCall(pod, (node,), {}, True)
        refused = node_refusals(call, services.knowledge.view()).get(node)
        if refused is not None:
            raise BindRefused(f"node {node} cannot hold the pod: {refused}")
        request = to_request(call, services.devices)
        decision = services.scheduler.schedule(request, BIND, time.perf_counter(),
                                               g.get("request_id"))
        if not decision.result:
            services.scheduler.record(replace(decision, demand=None))
            removed = [f"{s.name}: {r}" for s in decision.steps
                       for h, r in (s.removed or {}).items() if h == node]
            raise SchedulingFailed(409, f"node {node} no longer fits the pod"
                                        f"{': ' + removed[0] if removed else ''}", None,
                                   decision)
        try:
            services.kubernetes.bind(namespace, name, uid, node)
        except KubernetesError as exc:
            bound = _bound_node(services.kubernetes, namespace, name) \
                if exc.status == 409 else None
            if bound != node:
                services.scheduler.record(replace(decision, demand=None))
                if bound:
                    raise KubernetesError(f"{exc}; pod {namespace}/{name} is bound to node "
                                          f"{bound}", exc.status) from None
                raise
        _record_placement(services, decision, uid)
    except Exception as exc:  # noqa: BLE001 - kube-scheduler decides by its ignorable setting
        return _error({"Error": ""}, exc)
    return jsonify({"Error": ""})


def _bound_node(api: KubernetesApi, namespace: str, name: str) -> str | None:
    """The node the API server shows the pod on (``spec.nodeName``); None if none or unread."""
    try:
        return (api.read_pod(namespace, name).get("spec") or {}).get("nodeName") or None
    except KubernetesError:
        return None


def _record_placement(services: Any, decision: Decision, uid: str) -> None:
    """Record the decision of a bound pod: its demand the first time, none after.

    The first time the decision takes the pod's :func:`placement_id`; a pod this worker
    recorded, or whose demand the database holds (another worker's, a worker before a
    restart), is recorded without demand under the decision's own id. A database that
    cannot say counts as not recorded: a second record under the placement id would be
    refused by its primary key (logged by the decision writer), never counted twice.
    """
    placement = placement_id(uid)
    if decision.demand is not None and _first_placement(services.engine, placement):
        services.scheduler.record(replace(decision, id=placement))
    else:
        services.scheduler.record(replace(decision, demand=None))


def _first_placement(engine: Engine, placement: str) -> bool:
    """Whether the placement ``placement`` is recorded by no one yet; from now on it is."""
    if placement in _PLACED:
        return False
    try:
        with engine.connect() as connection:
            recorded = placement_recorded(connection, placement)
    except SQLAlchemyError as exc:
        LOG.warning("kubernetes extender: recorded placements unreadable: %s (request_id=%s)",
                    type(exc).__name__, g.get("request_id"))
        recorded = False
    return _keep(_PLACED, placement, None) and not recorded


class BindRefused(RuntimeError):
    """The chosen node cannot hold the pod, whatever else leaves it (``rules.pod_fit``)."""


class KubernetesError(RuntimeError):
    """The Kubernetes API server refused or could not be reached; the message says which.

    ``status``: the API server's HTTP status when it answered (409: a Binding for a pod
    already bound), else None.
    """

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class KubernetesApi:
    """The API server calls the extender makes: read a pod, create its Binding.

    ``[kubernetes] api_url`` (empty: no API server; bind then fails with Error),
    ``token_file`` (a bearer token, the service account's), ``ca_file``, ``timeout``.
    Uses requests (the ``kubernetes`` extra).
    """

    def __init__(self, url: str, token_file: str = "", ca_file: str = "",
                 timeout: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.token_file = token_file
        self.ca_file = ca_file
        self.timeout = timeout

    @classmethod
    def from_conf(cls, conf: Any) -> KubernetesApi:
        """The API of ``conf``'s ``[kubernetes]`` section."""
        return cls(conf.get("kubernetes", "api_url"), conf.get("kubernetes", "token_file"),
                   conf.get("kubernetes", "ca_file"), conf.get("kubernetes", "timeout"))

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        """One API call; KubernetesError for no API server, a failure or a non-2xx answer."""
        if not self.url:
            raise KubernetesError("no Kubernetes API server: set [kubernetes] api_url to bind")
        import requests

        headers = {"Accept": "application/json"}
        if self.token_file:
            with open(self.token_file, encoding="utf-8") as token:
                headers["Authorization"] = f"Bearer {token.read().strip()}"
        try:
            answer = requests.request(method, self.url + path, json=body, headers=headers,
                                      timeout=self.timeout, verify=self.ca_file or True)
        except requests.RequestException as exc:
            raise KubernetesError(f"{method} {path}: {type(exc).__name__}") from None
        if answer.status_code >= 300:
            raise KubernetesError(f"{method} {path}: {answer.status_code} "
                                  f"{answer.text[:200]}", answer.status_code)
        return answer.json() if answer.content else None

    def read_pod(self, namespace: str, name: str) -> Mapping[str, Any]:
        """The Pod object (``GET /api/v1/namespaces/<ns>/pods/<name>``)."""
        pod = self._call("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        if not isinstance(pod, Mapping) or not isinstance(pod.get("spec"), Mapping):
            raise KubernetesError(f"pod {namespace}/{name}: not a Pod")
        return pod

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Create the pod's Binding to ``node`` (``POST .../pods/<name>/binding``)."""
        self._call("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/binding", {
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
