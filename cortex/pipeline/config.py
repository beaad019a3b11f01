"""Load ``pipelines.yaml``: pipelines, per-service defaults and pipeline-choice rules.

File shape::

    defaults: {nova: NAME, cinder: NAME, manila: NAME}
    rules:                      # first match wins; every condition given must hold
      - pipeline: NAME
        service: nova
        match: {hypervisor_type: [str], required_traits: [str], gpu: bool,
                extra_specs: {key: value}}
    pipelines:
      NAME:
        service: nova|cinder|manila
        description: str
        unknown_hosts: keep|drop          # optional, else [scheduler] unknown_host_policy
        weighing: cortex|nova             # optional: how raw weights sum (decision.WEIGHINGS)
        filters:  [{name, options?: {}, on_error?: fail|skip, shadow?: bool,
                    max_duration_ms?: float}]
        weighers: [{name, options?: {}, multiplier?: float, on_error?: skip|fail,
                    max_duration_ms?: float}]

Everything is checked when the file is loaded (at startup and by ``cortex-manage
config check``): the shape, plugin names, each plugin's options, and that a plugin
serves the pipeline's service. Errors raise PipelineConfigError naming the place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from cortex.decision import WEIGHINGS
from cortex.documents import check_document, load_document
from cortex.plugins.base import Filter, OptionsError, Plugin, Weigher, build_options
from cortex.plugins.registry import PluginError, load_all, lookup

SERVICES = ("nova", "cinder", "manila", "kubernetes")
_STEP = {
    "type": "object", "required": ["name"], "additionalProperties": False,
    "properties": {"name": {"type": "string"}, "options": {"type": ["object", "null"]},
                   "on_error": {"enum": ["fail", "skip"]}, "shadow": {"type": "boolean"},
                   "max_duration_ms": {"type": "number", "exclusiveMinimum": 0},
                   "multiplier": {"type": "number"}},
}
PIPELINES_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["pipelines", "defaults"], "additionalProperties": False,
    "properties": {
        "defaults": {"type": "object", "additionalProperties": {"type": "string"},
                     "propertyNames": {"enum": list(SERVICES)}},
        "rules": {"type": "array", "items": {
            "type": "object", "required": ["pipeline", "service", "match"],
            "additionalProperties": False,
            "properties": {
                "pipeline": {"type": "string"}, "service": {"enum": list(SERVICES)},
                "match": {"type": "object", "additionalProperties": False, "properties": {
                    "hypervisor_type": {"type": "array", "items": {"type": "string"}},
                    "required_traits": {"type": "array", "items": {"type": "string"}},
                    "gpu": {"type": "boolean"},
                    "extra_specs": {"type": "object", "additionalProperties": {"type": "string"}},
                }}}}},
        "pipelines": {"type": "object", "minProperties": 1, "additionalProperties": {
            "type": "object", "required": ["service"], "additionalProperties": False,
            "properties": {
                "service": {"enum": list(SERVICES)}, "description": {"type": "string"},
                "unknown_hosts": {"enum": ["keep", "drop"]},
                "weighing": {"enum": list(WEIGHINGS)},
                "filters": {"type": "array", "items": _STEP},
                "weighers": {"type": "array", "items": _STEP}}}},
    },
}


class PipelineConfigError(ValueError):
    """pipelines.yaml cannot be used; the message names the pipeline, step and problem."""


PluginT = TypeVar("PluginT", bound=Plugin)


@dataclass(frozen=True)
class Step(Generic[PluginT]):
    """One configured filter or weigher of a pipeline: its ``plugin`` instance.

    ``on_error``: ``fail`` answers 503 so the caller keeps its own order (filters'
    default), ``skip`` records the error and goes on (weighers' default).
    ``shadow`` (filters): record what would be removed, remove nothing.
    ``max_duration_ms``: a step that ran longer counts as failed (its results are
    dropped under ``skip``). Python cannot pre-empt a running plugin: a plugin stuck
    for good is ended by gunicorn's worker timeout, not by this limit.
    """

    kind: str
    name: str
    plugin: PluginT
    multiplier: float = 1.0
    on_error: str = "fail"
    shadow: bool = False
    max_duration_ms: float | None = None


@dataclass(frozen=True)
class Pipeline:
    """A named pipeline for one service: ordered filters, then weighers.

    ``weighing``: how the weighers' raw weights make the final weight, Cortex's tanh sum
    with the caller's weight or Nova's normalised sum (:func:`cortex.decision.final_weights`).
    """

    name: str
    service: str
    description: str
    filters: tuple[Step[Filter], ...]
    weighers: tuple[Step[Weigher], ...]
    unknown_hosts: str | None = None
    weighing: str = "cortex"


@dataclass(frozen=True)
class Rule:
    """Choose ``pipeline`` for ``service`` requests matching every condition in ``match``."""

    pipeline: str
    service: str
    match: Mapping[str, Any]


@dataclass(frozen=True)
class PipelineSet:
    """All pipelines of a deployment, the per-service defaults and the choice rules."""

    pipelines: Mapping[str, Pipeline]
    defaults: Mapping[str, str]
    rules: tuple[Rule, ...]


def load_pipelines(path: str | Path) -> PipelineSet:
    """Read, validate and instantiate ``path``; raise PipelineConfigError on any problem."""
    return build_pipelines(load_document(path, PIPELINES_SCHEMA, PipelineConfigError),
                           source=str(path))


def build_pipelines(raw: Any, source: str = "pipelines") -> PipelineSet:
    """Validate the parsed document ``raw`` and build the PipelineSet."""
    check_document(raw, PIPELINES_SCHEMA, source, PipelineConfigError)
    load_all()
    pipelines = {name: _pipeline(name, spec, source) for name, spec in raw["pipelines"].items()}
    rules = tuple(Rule(r["pipeline"], r["service"], r["match"]) for r in raw.get("rules", ()))
    for service, name in raw["defaults"].items():
        _expect(pipelines, name, service, f"{source}: defaults/{service}")
    for i, rule in enumerate(rules):
        _expect(pipelines, rule.pipeline, rule.service, f"{source}: rules/{i}")
    return PipelineSet(pipelines, dict(raw["defaults"]), rules)


def _expect(pipelines: Mapping[str, Pipeline], name: str, service: str, where: str) -> None:
    """Raise unless pipeline ``name`` exists and serves ``service``."""
    if name not in pipelines:
        raise PipelineConfigError(f"{where}: unknown pipeline {name!r}")
    if pipelines[name].service != service:
        raise PipelineConfigError(
            f"{where}: pipeline {name!r} is for {pipelines[name].service}, not {service}")


def _pipeline(name: str, spec: Mapping[str, Any], source: str) -> Pipeline:
    """One Pipeline with its steps instantiated."""
    service = spec["service"]
    steps = {kind: tuple(_step(kind, step, service, f"{source}: pipelines/{name}")
                         for step in spec.get(f"{kind}s") or ())
             for kind in ("filter", "weigher")}
    return Pipeline(name, service, spec.get("description", ""), steps["filter"],
                    steps["weigher"], spec.get("unknown_hosts"),
                    spec.get("weighing", "cortex"))


def _step(kind: str, spec: Mapping[str, Any], service: str, where: str) -> Step[Any]:
    """Look up the plugin, check it serves ``service``, build its options."""
    try:
        cls = lookup(kind, spec["name"])
        options = build_options(cls, spec.get("options"))
    except (PluginError, OptionsError) as exc:
        raise PipelineConfigError(f"{where}: {exc}") from None
    if service not in cls.services:
        raise PipelineConfigError(
            f"{where}: {kind} {cls.name} serves {', '.join(cls.services)}, not {service}")
    if kind == "filter" and "multiplier" in spec:
        raise PipelineConfigError(f"{where}: filter {cls.name} takes no multiplier")
    if kind == "weigher" and "shadow" in spec:
        raise PipelineConfigError(f"{where}: weigher {cls.name} has no shadow mode")
    return Step(kind, cls.name, cls(options), float(spec.get("multiplier", 1.0)),
                spec.get("on_error", "fail" if kind == "filter" else "skip"),
                bool(spec.get("shadow", False)), spec.get("max_duration_ms"))
