"""Choose the pipeline for a request: a name, else the first matching rule, else the default.

Mirrors how the reference implementation infers its
``kvm-general-purpose-load-balancing``/``kvm-hana-bin-packing``/``vmware-…`` pipelines
from the flavor. The rules' ``hypervisor_type`` condition reads the hypervisor types the
request runs on: the flavor's ``capabilities:hypervisor_type``, else what Nova's
``vmware`` flag says (:func:`request_hypervisors`), unless every offered host the
knowledge view knows contradicts the flag (:func:`flag_contradiction`): then the
offered hosts' types decide. Mixed or unknown hosts leave the flag deciding; a named
pipeline (the body's ``pipeline`` field, a simulation's) is taken as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cortex.knowledge.view import KnowledgeView
from cortex.pipeline.config import Pipeline, PipelineConfigError, PipelineSet
from cortex.pipeline.overrides import with_overrides

#: The hypervisor type Nova's VMware driver reports for a cluster
#: (``nova/virt/vmwareapi/host.py``), lowercase.
VMWARE_HYPERVISOR = "vmware vcenter server"
#: The hypervisor types of KVM hosts, lowercase: Nova's libvirt driver reports libvirt's
#: connection type, ``QEMU``, under ``virt_type = kvm`` too (``nova/virt/libvirt/host.py``,
#: ``get_driver_type``); ``kvm`` and ``ch`` (Cloud Hypervisor) are the other names the
#: shipped KVM rules match.
KVM_HYPERVISORS = frozenset({"qemu", "kvm", "ch"})
#: The families a :class:`Choice` names when the offered hosts overruled the flag.
KVM, VMWARE = "kvm", "vmware"


class PipelineNotChosen(LookupError):
    """No pipeline fits the request (unknown name, wrong service, no rule, no default)."""


@dataclass(frozen=True)
class Choice:
    """The chosen ``pipeline``, and the ``vmware`` flag the offered hosts overruled.

    ``overruled``: None when the choice followed the request (a named pipeline, the
    flavor's ``capabilities:hypervisor_type``, or the ``vmware`` flag); else the flag's
    value (True or False) that every known offered host contradicted, and ``hosts``
    the family the choice followed instead (:data:`KVM` or :data:`VMWARE`).
    """

    pipeline: Pipeline
    overruled: bool | None = None
    hosts: str | None = None

    @property
    def record(self) -> dict[str, Any] | None:
        """What a decision records of it (``Decision.pipeline_choice``).

        None when the choice followed the request; when the hosts overruled the flag,
        ``{"followed": "hosts", "vmware_flag": bool, "hosts": "kvm"|"vmware"}``.
        """
        if self.overruled is None:
            return None
        return {"followed": "hosts", "vmware_flag": self.overruled, "hosts": self.hosts}


def choose_pipeline(pipelines: PipelineSet, request: Any, name: str | None = None,
                    step_options: Mapping[str, Mapping[str, Any]] | None = None,
                    multipliers: Mapping[str, float] | None = None,
                    view: KnowledgeView | None = None) -> Choice:
    """The pipeline for ``request``; raise PipelineNotChosen (answered with 400).

    ``name`` (a simulation's choice) wins over the request's ``pipeline`` field and the
    rules; ``step_options`` and ``multipliers`` are laid over the chosen pipeline
    (:func:`cortex.pipeline.overrides.with_overrides`; a bad one is PipelineNotChosen).
    ``view``: the knowledge whose hosts may overrule a Nova request's ``vmware`` flag
    for the rules (:func:`flag_contradiction`); None: the flag decides.
    """
    chosen = _chosen(pipelines, request, name, view)
    if not step_options and not multipliers:
        return chosen
    try:
        return Choice(with_overrides(chosen.pipeline, step_options, multipliers),
                      chosen.overruled, chosen.hosts)
    except PipelineConfigError as exc:
        raise PipelineNotChosen(str(exc)) from None


def _chosen(pipelines: PipelineSet, request: Any, name: str | None,
            view: KnowledgeView | None) -> Choice:
    """The named pipeline, else the request's, else the first matching rule's or default."""
    service = request.service
    name = name or request.pipeline
    if name:
        chosen = pipelines.pipelines.get(name)
        if chosen is None:
            raise PipelineNotChosen(f"unknown pipeline {name!r}")
        if chosen.service != service:
            raise PipelineNotChosen(
                f"pipeline {name!r} is for {chosen.service}, not {service}")
        return Choice(chosen)
    offered = flag_contradiction(request, view)
    hypervisors = request_hypervisors(request) if offered is None else offered
    overruled, family = (None, None) if offered is None else (
        bool(request.vmware), KVM if request.vmware else VMWARE)
    for rule in pipelines.rules:
        if rule.service == service and matches(rule.match, request, hypervisors):
            return Choice(pipelines.pipelines[rule.pipeline], overruled, family)
    default = pipelines.defaults.get(service)
    if default is None:
        raise PipelineNotChosen(f"no rule matches and {service} has no default pipeline")
    return Choice(pipelines.pipelines[default], overruled, family)


def flag_contradiction(request: Any, view: KnowledgeView | None) -> frozenset[str] | None:
    """The offered hosts' hypervisor types when they contradict a Nova request's ``vmware`` flag.

    SAP's Nova hook (``nova/scheduler/external.py``) sends ``vmware: true`` unless the
    flavor has a non-VMware ``capabilities:hypervisor_type`` or the image an
    ``img_hv_type``, so a KVM flavor without either comes flagged as VMware. Read only
    where the flag decides: a ``nova`` request whose flavor has no
    ``capabilities:hypervisor_type``. The types (lowercase, e.g. ``{"qemu"}``) when the
    flag is true and every node of every offered host the view knows
    (``HostState.nodes[...].hypervisor_type``) reports one of :data:`KVM_HYPERVISORS`,
    or the flag is false and every one reports :data:`VMWARE_HYPERVISOR`
    (case-insensitively; hosts the view does not know are left out). None otherwise:
    no view, no known offered host, a node of another or unknown type (mixed or
    unknown: the flag decides). Stops at the first node that does not contradict the
    flag, so a call whose flag the hosts confirm reads one host.
    """
    if view is None or getattr(request, "service", None) != "nova":
        return None
    if request.flavor.extra_specs.get("capabilities:hypervisor_type"):
        return None
    contrary = KVM_HYPERVISORS if request.vmware else frozenset({VMWARE_HYPERVISOR})
    known, found = view.hosts, set()
    for name in request.candidates.hosts:
        state = known.get(name)
        if state is None:
            continue
        for node in state.all_nodes:
            kind = (node.hypervisor_type or "").lower()
            if kind not in contrary:
                return None
            found.add(kind)
    return frozenset(found) if found else None


def request_hypervisors(request: Any) -> frozenset[str]:
    """The hypervisor types (lowercase) a request asks for, from the request alone.

    The flavor's ``capabilities:hypervisor_type``; else :data:`VMWARE_HYPERVISOR` when
    the ``vmware`` flag is set; else none (no ``hypervisor_type`` condition holds).
    """
    specs = getattr(request, "flavor", None)
    specs = specs.extra_specs if specs is not None else {}
    asked = specs.get("capabilities:hypervisor_type", "").lower()
    if asked:
        return frozenset({asked})
    if getattr(request, "vmware", False):
        return frozenset({VMWARE_HYPERVISOR})
    return frozenset()


def matches(match: Mapping[str, Any], request: Any,
            hypervisors: frozenset[str] | None = None) -> bool:
    """Whether every condition of ``match`` holds for a Nova request.

    ``hypervisor_type``: every type of ``hypervisors`` is one of them, case-insensitively
    (``hypervisors``: the offered hosts' types where they overrule the ``vmware`` flag,
    :func:`flag_contradiction`; by default :func:`request_hypervisors`, the flavor's
    ``capabilities:hypervisor_type``, else the ``vmware`` flag); ``required_traits``:
    all are required by the flavor; ``gpu``: the request asks for devices or not
    (:attr:`cortex.request.nova.NovaRequest.asks_for_devices`);
    ``extra_specs``: each key has that value.
    """
    specs = getattr(request, "flavor", None)
    specs = specs.extra_specs if specs is not None else {}
    if "hypervisor_type" in match:
        wanted = {h.lower() for h in match["hypervisor_type"]}
        if hypervisors is None:
            hypervisors = request_hypervisors(request)
        if not hypervisors or not hypervisors <= wanted:
            return False
    if "required_traits" in match and not set(match["required_traits"]) <= set(
            getattr(request, "required_traits", ())):
        return False
    if "gpu" in match and match["gpu"] != getattr(request, "asks_for_devices", False):
        return False
    return all(specs.get(k) == v for k, v in match.get("extra_specs", {}).items())
