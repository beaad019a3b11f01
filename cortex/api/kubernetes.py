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
- ``filter``: ``ExtenderArgs`` -> ``ExtenderFilterResult``. The pod goes through the
  ``kubernetes`` service's pipeline (chosen as Nova's are) over the offered nodes, as a
  call that promises nothing. Passing nodes come back as ``Nodes`` (a NodeList of the
  objects sent) or, with ``nodeCacheCapable``, ``NodeNames``; a node a pipeline step
  removed is in ``FailedNodes`` with the step's reason (preemption could free room); a
  node whose labels refuse the pod's node selector or required affinity is in
  ``FailedAndUnresolvableNodes``.
- ``prioritize``: the same run's final weights scaled to whole scores 0..10
  (``MaxExtenderPriority``), best 10; nodes the pipeline removed score 0.
- ``bind``: ``ExtenderBindingArgs`` -> ``ExtenderBindingResult``. The pod (remembered
  from its filter call, else read from the API server) is judged on the chosen node
  once more and promised there with the GPUs nova-compute's model would hand it, as a
  Nova create is promised (the in-flight reservations: its pod group's later members
  see it); then the Binding is created through the API server (``[kubernetes]
  api_url``).

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
from datetime import UTC, datetime
from typing import Any

from flask import current_app, g, jsonify
from sqlalchemy.exc import SQLAlchemyError

from cortex.api.body import read_json_body
from cortex.api.errors import ApiError
from cortex.knowledge.loader import KUBERNETES
from cortex.request.base import BadRequest
from cortex.request.kubernetes import PodCall, canonical, node_refusal, parse_args, to_request
from cortex.scheduler.service import LIVE, RunOptions, SchedulingFailed
from cortex.store.kubernetes import remember_labels

LOG = logging.getLogger(__name__)
#: kube-scheduler's MaxExtenderPriority (extender/v1/types.go).
MAX_PRIORITY = 10
#: Pods remembered from their filter calls for their bind (per worker), by UID.
_PODS: OrderedDict[str, Mapping[str, Any]] = OrderedDict()
_PODS_LOCK = threading.Lock()
_PODS_KEPT = 4096
#: Filter and prioritize: judged and recorded, never promised.
JUDGE = RunOptions(promise=False)


def _remember(call: PodCall) -> None:
    """Keep the pod for its bind (the newest ``_PODS_KEPT``)."""
    if call.uid:
        with _PODS_LOCK:
            _PODS[call.uid] = call.pod
            _PODS.move_to_end(call.uid)
            while len(_PODS) > _PODS_KEPT:
                _PODS.popitem(last=False)


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


def _judge(call: PodCall) -> tuple[Any, dict[str, str], dict[str, str]]:
    """``(decision, failed, unresolvable)``: the pipeline's run over the admitted nodes.

    ``unresolvable``: nodes whose labels refuse the pod; ``failed``: nodes a step removed,
    with its reason. Raises BadRequest for a pod that cannot be a request, and
    SchedulingFailed when the scheduler cannot answer.
    """
    services = current_app.extensions["cortex"]
    _learn_labels(call)
    unresolvable = {}
    for name, node in call.nodes.items():
        reason = node_refusal(call.pod, node)
        if reason is not None:
            unresolvable[name] = reason
    admitted = PodCall(call.pod, tuple(n for n in call.node_names if n not in unresolvable),
                       call.nodes, call.by_name)
    request = to_request(admitted, services.devices)
    _remember(call)  # a pod that is a request: its bind may come
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
    return decision, failed, unresolvable


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
        decision, failed, unresolvable = _judge(call)
    except BadRequest as exc:
        raise ApiError(400, str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - kube-scheduler decides by its ignorable setting
        return _error(empty, exc)
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
        decision, failed, unresolvable = _judge(call)
    except BadRequest as exc:
        raise ApiError(400, str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - a prioritize error is ignored by kube-scheduler
        LOG.warning("kubernetes extender: prioritize failed: %s (request_id=%s)", exc,
                    g.get("request_id"))
        return jsonify([{"Host": n, "Score": 0} for n in call.node_names])
    scores = scaled_scores([h for h in decision.result or () if h not in failed],
                           decision.final_weights)
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
    values = {k: args[k] for k in ("PodName", "PodNamespace", "PodUID", "Node")}
    try:
        if not services.kubernetes.url:  # nothing promised that could not be bound
            raise KubernetesError("no Kubernetes API server: set [kubernetes] api_url to bind")
        pod = _PODS.get(values["PodUID"]) or services.kubernetes.read_pod(
            values["PodNamespace"], values["PodName"])
        call = PodCall(pod, (values["Node"],), {}, True)
        request = to_request(call, services.devices)
        decision = services.scheduler.schedule(request, LIVE, time.perf_counter(),
                                               g.get("request_id"))
        if not decision.result:
            removed = [f"{s.name}: {r}" for s in decision.steps
                       for h, r in (s.removed or {}).items() if h == values["Node"]]
            raise SchedulingFailed(409, f"node {values['Node']} no longer fits the pod"
                                        f"{': ' + removed[0] if removed else ''}", None,
                                   decision)
        services.kubernetes.bind(values["PodNamespace"], values["PodName"], values["PodUID"],
                                 values["Node"])
    except Exception as exc:  # noqa: BLE001 - kube-scheduler decides by its ignorable setting
        return _error({"Error": ""}, exc)
    return jsonify({"Error": ""})


class KubernetesError(RuntimeError):
    """The Kubernetes API server refused or could not be reached; the message says which."""


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
                                  f"{answer.text[:200]}")
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
