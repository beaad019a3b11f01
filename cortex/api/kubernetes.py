"""The kube-scheduler extender: ``/scheduler/kubernetes/{filter,prioritize,bind}``.

This module parses and answers; the work is :class:`cortex.services.kubernetes.Extender`'s.

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
from typing import Any

from flask import current_app, g, jsonify

from cortex.api.body import read_json_body
from cortex.api.errors import ApiError
from cortex.request.base import BadRequest
from cortex.request.kubernetes import PodCall, canonical, parse_args
from cortex.services.kubernetes import Judgement, SchedulingFailed, scaled_scores

LOG = logging.getLogger(__name__)


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
        judged = current_app.extensions["cortex"].kubernetes.judge(call, g.get("request_id"))
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
        judged = current_app.extensions["cortex"].kubernetes.judge(call, g.get("request_id"))
    except Exception as exc:  # noqa: BLE001 - a prioritize error is ignored by kube-scheduler
        LOG.warning("kubernetes extender: prioritize failed: %s (request_id=%s)", exc,
                    g.get("request_id"))
        judged = Judgement(None, {}, {})
    decision = judged.decision
    scores = {} if decision is None else scaled_scores(
        [h for h in decision.result or () if h not in judged.failed], decision.final_weights)
    return jsonify([{"Host": n, "Score": scores.get(n, 0)} for n in call.node_names])


def bind_pod():
    """``POST /scheduler/kubernetes/bind``: promise the node, bind the pod (module doc)."""
    args = _arguments("ExtenderBindingArgs")
    try:
        current_app.extensions["cortex"].kubernetes.bind(
            *(args[k] for k in ("PodNamespace", "PodName", "PodUID", "Node")),
            g.get("request_id"))
    except Exception as exc:  # noqa: BLE001 - kube-scheduler decides by its ignorable setting
        return _error({"Error": ""}, exc)
    return jsonify({"Error": ""})
