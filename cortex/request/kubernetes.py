"""Kubernetes pods as scheduling requests: the kube-scheduler extender's arguments, parsed.

kube-scheduler calls an extender with the types of ``k8s.io/kube-scheduler/extender/v1``
(``types.go``). Those Go structs carry no JSON tags, so the wire keys are the Go field
names (``Pod``, ``Nodes``, ``NodeNames``, ``FailedNodes``, ``Host``, ``Score``,
``PodName``...) and Go's decoder matches keys case-insensitively (the upstream
``types_test.go`` round-trips lowercased JSON): :func:`field` reads them so, answers
are written in the exact casing. The Pod and Node objects inside keep their own
camelCase API fields.

A pod becomes the RequestSpec Nova would send for a VM of the same shape, parsed into a
:class:`~cortex.request.nova.NovaRequest` of service ``kubernetes``, so the same rules
judge it:

- CPU and memory: the sum of the containers' requests (limits where no request), or the
  largest init container's, as the kubelet sizes a pod; the CPUs are shared (floating):
  kube-scheduler's own NodeResourcesFit counts them, and the kubelet's static CPU
  manager, not Nova's dedicated sets, pins them;
- ``nvidia.com/gpu``: that many passthrough NVIDIA GPUs of one guest NUMA cell's worth
  (the device plugin's unit); ``nvidia.com/mig-<profile>`` (``mig-3g.40gb``): MIG
  instances of that profile; the PCI NUMA policy is ``preferred`` unless the
  ``numa-policy`` annotation says otherwise;
- the topology annotations (:data:`ANNOTATIONS`) become Cortex's group placement hints
  (:mod:`cortex.request.groups`): network bandwidth, latency sensitivity, preferred
  domain, placement strategy; a pod group (gang) is the label
  ``scheduling.x-k8s.io/pod-group`` (the upstream coscheduling plugin's) with its size
  from the ``pod-group-size`` annotation, else its PodGroup's ``minMember``; each
  annotation's values are :data:`ANNOTATION_VALUES`;
- ``nodeSelector`` and required node affinity are judged on the labels of the Node
  objects kube-scheduler sends (:func:`node_refusal`), and so is a node's own
  ``status.allocatable`` where Cortex has no report of the node
  (:func:`allocatable_refusal`).

Malformed arguments (:func:`parse_args`) raise BadRequest, answered 400. A pod that
cannot be a request (a bad annotation, a fraction of a GPU, a quantity that is not one)
raises BadRequest too, from :func:`pod_spec`: the extender fails the pod's nodes with
its message instead, as the arguments themselves were well formed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from cortex.request.base import BadRequest
from cortex.request.devices import DeviceCatalog
from cortex.request.groups import STRATEGIES, network_placement
from cortex.request.nova import NovaRequest

VENDOR_NVIDIA = "10de"
GPU_RESOURCE = "nvidia.com/gpu"
_MIG_RESOURCE = re.compile(r"^nvidia\.com/mig-(?P<slices>\d+)g\.(?P<memory>\d+)gb$")
PREFIX = "topology.cortex.dev/"
#: Pod annotations -> Cortex's group placement hints (:mod:`cortex.request.groups`).
ANNOTATIONS = {
    f"{PREFIX}network-bandwidth": "network_bandwidth",
    f"{PREFIX}latency-sensitive": "latency_sensitive",
    f"{PREFIX}preferred-domain": "preferred_domain",
    f"{PREFIX}placement-strategy": "placement_strategy",
    f"{PREFIX}pod-group-size": "group_size",
    f"{PREFIX}nvlink-clique": "nvlink_clique",
}
NUMA_POLICY = f"{PREFIX}numa-policy"
#: The PCI NUMA policies of the ``numa-policy`` annotation (Nova's
#: ``hw:pci_numa_affinity_policy``, ``nova/objects/fields.py`` ``PCINUMAAffinityPolicy``).
NUMA_POLICIES = ("legacy", "preferred", "required", "socket")
#: What each annotation takes, as a pod's reason quotes it. The hints' values are those
#: :func:`cortex.request.groups.network_placement` accepts, which judges them.
ANNOTATION_VALUES = {
    f"{PREFIX}network-bandwidth": "a positive number of Gbit/s (the domain's least uplink)",
    f"{PREFIX}latency-sensitive": "true or false",
    f"{PREFIX}preferred-domain": "a leaf, spine or block name",
    f"{PREFIX}placement-strategy": f"one of {', '.join(STRATEGIES)}",
    f"{PREFIX}pod-group-size": "an integer 1..10000",
    f"{PREFIX}nvlink-clique": "true or false",
    NUMA_POLICY: f"one of {', '.join(NUMA_POLICIES)}",
}
#: Pod labels naming the pod's group (gang): the coscheduling plugin's, current and older.
POD_GROUP_LABELS = ("scheduling.x-k8s.io/pod-group", "pod-group.scheduling.sigs.k8s.io")
_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1), "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9),
    "T": Decimal(10**12), "P": Decimal(10**15), "E": Decimal(10**18), "Ki": Decimal(2**10),
    "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40), "Pi": Decimal(2**50),
    "Ei": Decimal(2**60), "m": Decimal("0.001"), "u": Decimal("0.000001"),
    "n": Decimal("0.000000001")}
_QUANTITY = re.compile(r"^(?P<number>[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?)"
                       r"(?P<suffix>|[numkMGTPE]|[KMGTPE]i)$")


def field(mapping: Mapping[str, Any], name: str) -> Any:
    """``mapping[name]`` matched case-insensitively, as Go's decoder matches untagged fields.

    An exact match wins; None when absent.
    """
    if name in mapping:
        return mapping[name]
    lowered = name.lower()
    return next((v for k, v in mapping.items() if k.lower() == lowered), None)


#: The Go field names of the extender types the extender reads, by their lower case.
FIELDS = {name.lower(): name for name in (
    "Pod", "Nodes", "NodeNames", "PodName", "PodNamespace", "PodUID", "Node")}


def canonical(document: Any) -> Any:
    """``document`` with its keys in the Go field names, as Go's decoder would match them.

    A key equal to a field name wins over one that only matches it case-insensitively;
    keys of no field pass as they are. Anything but an object is returned unchanged.
    """
    if not isinstance(document, Mapping):
        return document
    result: dict[str, Any] = {}
    for key, value in document.items():
        name = FIELDS.get(key.lower(), key) if isinstance(key, str) else key
        if name not in result or key == name:
            result[name] = value
    return result


def quantity(value: Any, what: str) -> Decimal:
    """A Kubernetes resource quantity (``500m``, ``2``, ``64Gi``, ``1e3``) as a number.

    Raises BadRequest for anything else.
    """
    match = _QUANTITY.match(str(value).strip()) if isinstance(value, str | int | float) else None
    if match is None:
        raise BadRequest(f"{what}: {str(value)[:40]!r} is not a Kubernetes quantity")
    try:
        return Decimal(match["number"]) * _SUFFIXES[match["suffix"]]
    except InvalidOperation:
        raise BadRequest(f"{what}: {str(value)[:40]!r} is not a Kubernetes quantity") from None


@dataclass(frozen=True)
class PodCall:
    """One extender call: the pod, the offered nodes and what was parsed of them.

    ``node_names`` in kube-scheduler's order, each once; ``nodes`` the Node objects by
    name (empty when kube-scheduler sent names only: ``nodeCacheCapable``); ``by_name``
    tells which form the answer takes.
    """

    pod: Mapping[str, Any]
    node_names: tuple[str, ...]
    nodes: Mapping[str, Mapping[str, Any]]
    by_name: bool

    @property
    def uid(self) -> str | None:
        """The pod's UID."""
        return (self.pod.get("metadata") or {}).get("uid")


def parse_args(args: Any) -> PodCall:
    """The ``ExtenderArgs`` of a filter or prioritize call; BadRequest when malformed.

    Exactly one of ``Nodes`` (a NodeList) and ``NodeNames`` must be set, as
    kube-scheduler sends one or the other.
    """
    if not isinstance(args, Mapping):
        raise BadRequest("ExtenderArgs must be a JSON object")
    pod = field(args, "Pod")
    if not isinstance(pod, Mapping) or not isinstance(pod.get("spec"), Mapping):
        raise BadRequest("Pod must be a Pod object with a spec")
    nodes, names = field(args, "Nodes"), field(args, "NodeNames")
    if (nodes is None) == (names is None):
        raise BadRequest("exactly one of Nodes and NodeNames must be set")
    objects: dict[str, Mapping[str, Any]] = {}
    if names is not None:
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise BadRequest("NodeNames must be a list of node names")
        offered = list(names)
    else:
        items = nodes.get("items") if isinstance(nodes, Mapping) else None
        if not isinstance(items, list):
            raise BadRequest("Nodes must be a NodeList with items")
        offered = []
        for item in items:
            name = ((item or {}).get("metadata") or {}).get("name") \
                if isinstance(item, Mapping) else None
            if not isinstance(name, str) or not name:
                raise BadRequest("every Node must have metadata.name")
            offered.append(name)
            objects.setdefault(name, item)
    return PodCall(pod, tuple(dict.fromkeys(offered)), objects, names is not None)


def _container_resources(container: Mapping[str, Any], where: str) -> dict[str, Decimal]:
    """A container's requests, its limits where it requests nothing of a resource."""
    resources = container.get("resources") or {}
    found = {k: quantity(v, f"{where} limits {k}")
             for k, v in (resources.get("limits") or {}).items()}
    found.update({k: quantity(v, f"{where} requests {k}")
                  for k, v in (resources.get("requests") or {}).items()})
    return found


def pod_resources(pod: Mapping[str, Any]) -> dict[str, Decimal]:
    """What the pod asks for: max(sum over containers, largest init container) per resource."""
    spec = pod["spec"]
    total: dict[str, Decimal] = {}
    for index, container in enumerate(spec.get("containers") or ()):
        for name, amount in _container_resources(container, f"containers[{index}]").items():
            total[name] = total.get(name, Decimal(0)) + amount
    for index, container in enumerate(spec.get("initContainers") or ()):
        for name, amount in _container_resources(container, f"initContainers[{index}]").items():
            total[name] = max(total.get(name, Decimal(0)), amount)
    return total


def pod_mig(wanted: Mapping[str, Decimal]) -> tuple[str, str, int] | None:
    """``(resource, profile, count)`` of the MIG instances a pod asks for; None: none.

    ``wanted``: :func:`pod_resources`. The resource is ``nvidia.com/mig-<profile>``, the
    NVIDIA device plugin's name under its ``mixed`` strategy (``mig-3g.40gb``: profile
    ``3g.40gb``). BadRequest for more than one profile or a fraction of an instance.
    """
    found = [(name, match, amount) for name, amount in sorted(wanted.items())
             if (match := _MIG_RESOURCE.match(name)) is not None and amount > 0]
    if len(found) > 1:
        raise BadRequest("a pod may ask for MIG instances of one profile only")
    if not found:
        return None
    name, match, amount = found[0]
    if amount != amount.to_integral_value():
        raise BadRequest(f"{name}: {amount} is not a whole number of MIG instances")
    return name, f"{match['slices']}g.{match['memory']}gb", int(amount)


def annotation_refusal(annotations: Mapping[str, Any]) -> str | None:
    """Why the pod's Cortex annotations cannot be followed; None when they can.

    The first annotation of :data:`ANNOTATION_VALUES` whose value is not one it takes,
    named with its value and the values it takes:
    ``annotation topology.cortex.dev/network-bandwidth='high': a positive number of
    Gbit/s ...``. Annotations outside that table are not read.
    """
    for key, allowed in ANNOTATION_VALUES.items():
        if key not in annotations:
            continue
        value = str(annotations[key])
        if key == NUMA_POLICY:
            followed = value in NUMA_POLICIES
        else:
            try:
                network_placement({ANNOTATIONS[key]: (value,)}, 1, None, None, None)
                followed = True
            except BadRequest:
                followed = False
        if not followed:
            return f"annotation {key}={value[:80]!r}: {allowed}"
    return None


def pod_spec(call: PodCall, min_member: int | None = None) -> dict[str, Any]:
    """The Nova body (RequestSpec and candidates) of the pod (module doc).

    ``min_member``: the pod group's ``minMember`` (its PodGroup object's), which becomes
    the group's ``min_count`` hint, and its size where no ``pod-group-size`` annotation
    gives one (:mod:`cortex.scheduler.groups`).

    BadRequest for a pod that cannot be one: :func:`annotation_refusal`'s reason, a
    quantity that is not one, a fraction of a GPU, MIG instances of two profiles.
    """
    pod = call.pod
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    labels = metadata.get("labels") or {}
    refusal = annotation_refusal(annotations)
    if refusal is not None:
        raise BadRequest(refusal)
    wanted = pod_resources(pod)
    cpus = wanted.get("cpu", Decimal(0))
    vcpus = max(1, math.ceil(cpus))
    memory_mb = max(1, math.ceil(wanted.get("memory", Decimal(0)) / 2**20))
    extra: dict[str, str] = {}
    gpus = wanted.get(GPU_RESOURCE, Decimal(0))
    if gpus != gpus.to_integral_value() or gpus < 0:
        raise BadRequest(f"{GPU_RESOURCE}: {gpus} is not a whole number of GPUs")
    policy = annotations.get(NUMA_POLICY, "preferred")
    data: dict[str, Any] = {
        "flavor": {"nova_object.data": {
            "name": f"pod.{metadata.get('namespace', 'default')}.{metadata.get('name', '')}",
            "vcpus": vcpus, "memory_mb": memory_mb, "root_gb": 0, "ephemeral_gb": 0,
            "swap": 0, "extra_specs": extra}},
        "image": {"nova_object.data": {"properties": {"nova_object.data": {}}}},
        "instance_uuid": metadata.get("uid"), "num_instances": 1,
        "project_id": metadata.get("namespace") or "default",
        "scheduler_hints": _hints(annotations, labels, min_member)}
    if gpus:
        data["pci_requests"] = {"nova_object.data": {"requests": [{"nova_object.data": {
            "count": int(gpus), "spec": [{"vendor_id": VENDOR_NVIDIA}], "alias_name": "gpu",
            "numa_policy": policy, "request_id": None}}]}}
    mig = pod_mig(wanted)
    if mig is not None:
        _, profile, count = mig
        slices, memory = profile.removesuffix("gb").split("g.")
        extra["resources:VGPU"] = str(count)
        extra[f"trait:CUSTOM_NVIDIA_{slices}G_{memory}GB"] = "required"
    return {"spec": {"nova_object.name": "RequestSpec", "nova_object.data": data},
            "hosts": [{"host": n, "hypervisor_hostname": n} for n in call.node_names],
            "weights": dict.fromkeys(call.node_names, 0.0),
            "context": {"request_id": f"req-pod-{metadata.get('uid', '')}",
                        "project_id": data["project_id"]}}


def _hints(annotations: Mapping[str, Any], labels: Mapping[str, Any],
           min_member: int | None = None) -> dict[str, list[str]]:
    """The group placement hints of the pod's annotations, pod-group label and minMember."""
    hints = {hint: [str(annotations[key])] for key, hint in ANNOTATIONS.items()
             if key in annotations}
    group = next((labels[k] for k in POD_GROUP_LABELS if labels.get(k)), None)
    if group:
        hints["group_id"] = [f"pod-group:{group}"]
        if min_member:
            hints["min_count"] = [str(min_member)]
            hints.setdefault("group_size", [str(min_member)])
    return hints


def to_request(call: PodCall, devices: DeviceCatalog | None = None,
               min_member: int | None = None) -> NovaRequest:
    """The pod as a NovaRequest of service ``kubernetes``; BadRequest when it cannot be one.

    ``min_member``: its pod group's ``minMember`` (:func:`pod_spec`).
    """
    return NovaRequest.from_body(pod_spec(call, min_member), devices, service="kubernetes")


def node_refusal(pod: Mapping[str, Any], node: Mapping[str, Any]) -> str | None:
    """Why ``node``'s labels refuse the pod's ``nodeSelector`` or required node affinity.

    None when they admit it. Affinity's ``nodeSelectorTerms`` are ORed, each term's
    ``matchExpressions`` ANDed (operators In, NotIn, Exists, DoesNotExist, Gt, Lt), as
    kube-scheduler's NodeAffinity plugin reads them; ``matchFields`` are not judged.
    """
    labels = ((node.get("metadata") or {}).get("labels")) or {}
    spec = pod["spec"]
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return f"node selector {key}={value} does not match"
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = affinity.get("nodeSelectorTerms") or ()
    if terms and not any(_term_matches(t.get("matchExpressions") or (), labels) for t in terms):
        return "no required node affinity term matches"
    return None


def allocatable_refusal(wanted: Mapping[str, Decimal], node: Mapping[str, Any]) -> str | None:
    """Why ``node``'s own ``status.allocatable`` cannot hold the pod's GPUs; None if it can.

    For a node Cortex has no cortex-agent report of, where the Node object is all it
    knows. ``wanted``: :func:`pod_resources`. Each of ``nvidia.com/gpu`` and
    ``nvidia.com/mig-<profile>`` the pod asks for must be allocatable at least as many
    times (absent: 0), as kube-scheduler's NodeResourcesFit requires of an extended
    resource (``noderesources/fit.go`` ``fitsRequest``; a request above the node's
    allocatable is unresolvable there too). The reason is in its words:
    ``Insufficient nvidia.com/gpu: 2 requested, 0 allocatable``.
    """
    allocatable = ((node.get("status") or {}).get("allocatable")) or {}
    for name, amount in sorted(wanted.items()):
        if amount <= 0 or not (name == GPU_RESOURCE or _MIG_RESOURCE.match(name)):
            continue
        try:
            have = quantity(allocatable[name], name) if name in allocatable else Decimal(0)
        except BadRequest as exc:
            return f"node allocatable {exc}"
        if have < amount:
            return (f"Insufficient {name}: {_number(amount)} requested, {_number(have)} "
                    "allocatable")
    return None


def _number(amount: Decimal) -> str:
    """``amount`` as a plain number: ``2``, ``0.5``."""
    return str(int(amount)) if amount == amount.to_integral_value() else f"{amount.normalize():f}"


def _term_matches(expressions: Sequence[Mapping[str, Any]], labels: Mapping[str, str]) -> bool:
    """Whether every expression of one node selector term holds for ``labels``."""
    for expression in expressions:
        key, operator = str(expression.get("key")), expression.get("operator")
        values = list(expression.get("values") or ())
        present = key in labels
        if operator == "In":
            ok = present and labels[key] in values
        elif operator == "NotIn":
            ok = not present or labels[key] not in values
        elif operator == "Exists":
            ok = present
        elif operator == "DoesNotExist":
            ok = not present
        elif operator in ("Gt", "Lt") and len(values) == 1:
            try:
                number, bound = int(labels[key]), int(values[0])
            except (KeyError, ValueError):
                return False
            ok = number > bound if operator == "Gt" else number < bound
        else:
            raise BadRequest(f"node affinity operator {operator!r} with {len(values)} values")
        if not ok:
            return False
    return True
