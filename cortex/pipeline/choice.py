"""Choose the pipeline for a request: explicit name, else the first matching rule, else default.

Mirrors how the reference implementation infers its
``kvm-general-purpose-load-balancing``/``kvm-hana-bin-packing``/``vmware-…`` pipelines
from the flavor.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cortex.pipeline.config import Pipeline, PipelineSet
from cortex.rules.demand import asks_for_devices

VMWARE_HYPERVISOR = "vmware vcenter server"


class PipelineNotChosen(LookupError):
    """No pipeline fits the request (unknown name, wrong service, no rule, no default)."""


def choose_pipeline(pipelines: PipelineSet, request: Any) -> Pipeline:
    """The pipeline for ``request``; raise PipelineNotChosen (answered with 400)."""
    service = request.service
    if request.pipeline:
        chosen = pipelines.pipelines.get(request.pipeline)
        if chosen is None:
            raise PipelineNotChosen(f"unknown pipeline {request.pipeline!r}")
        if chosen.service != service:
            raise PipelineNotChosen(
                f"pipeline {request.pipeline!r} is for {chosen.service}, not {service}")
        return chosen
    for rule in pipelines.rules:
        if rule.service == service and matches(rule.match, request):
            return pipelines.pipelines[rule.pipeline]
    default = pipelines.defaults.get(service)
    if default is None:
        raise PipelineNotChosen(f"no rule matches and {service} has no default pipeline")
    return pipelines.pipelines[default]


def matches(match: Mapping[str, Any], request: Any) -> bool:
    """Whether every condition of ``match`` holds for a Nova request.

    ``hypervisor_type``: the flavor's ``capabilities:hypervisor_type`` (or ``vmware``
    flag) is one of them, case-insensitively; ``required_traits``: all are required
    by the flavor; ``gpu``: the request asks for devices or not
    (:func:`cortex.rules.demand.asks_for_devices`);
    ``extra_specs``: each key has that value.
    """
    specs = getattr(request, "flavor", None)
    specs = specs.extra_specs if specs is not None else {}
    if "hypervisor_type" in match:
        wanted = {h.lower() for h in match["hypervisor_type"]}
        actual = specs.get("capabilities:hypervisor_type", "").lower()
        if getattr(request, "vmware", False) and not actual:
            actual = VMWARE_HYPERVISOR
        if actual not in wanted:
            return False
    if "required_traits" in match and not set(match["required_traits"]) <= set(
            getattr(request, "required_traits", ())):
        return False
    if "gpu" in match and match["gpu"] != asks_for_devices(request):
        return False
    return all(specs.get(k) == v for k, v in match.get("extra_specs", {}).items())
