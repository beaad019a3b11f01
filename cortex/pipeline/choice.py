"""Choose the pipeline for a request: a name, else the first matching rule, else the default.

Mirrors how the reference implementation infers its
``kvm-general-purpose-load-balancing``/``kvm-hana-bin-packing``/``vmware-…`` pipelines
from the flavor.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cortex.pipeline.config import Pipeline, PipelineConfigError, PipelineSet
from cortex.pipeline.overrides import with_overrides

VMWARE_HYPERVISOR = "vmware vcenter server"


class PipelineNotChosen(LookupError):
    """No pipeline fits the request (unknown name, wrong service, no rule, no default)."""


def choose_pipeline(pipelines: PipelineSet, request: Any, name: str | None = None,
                    step_options: Mapping[str, Mapping[str, Any]] | None = None,
                    multipliers: Mapping[str, float] | None = None) -> Pipeline:
    """The pipeline for ``request``; raise PipelineNotChosen (answered with 400).

    ``name`` (a simulation's choice) wins over the request's ``pipeline`` field and the
    rules; ``step_options`` and ``multipliers`` are laid over the chosen pipeline
    (:func:`cortex.pipeline.overrides.with_overrides`; a bad one is PipelineNotChosen).
    """
    chosen = _chosen(pipelines, request, name)
    if not step_options and not multipliers:
        return chosen
    try:
        return with_overrides(chosen, step_options, multipliers)
    except PipelineConfigError as exc:
        raise PipelineNotChosen(str(exc)) from None


def _chosen(pipelines: PipelineSet, request: Any, name: str | None) -> Pipeline:
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
    (:attr:`cortex.request.nova.NovaRequest.asks_for_devices`);
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
    if "gpu" in match and match["gpu"] != getattr(request, "asks_for_devices", False):
        return False
    return all(specs.get(k) == v for k, v in match.get("extra_specs", {}).items())
