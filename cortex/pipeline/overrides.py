"""A configured pipeline with some step options and multipliers changed, for simulations.

``POST /v1/scheduler/<service>/simulate`` lets an operator ask "what if this weigher
counted double" or "what if this filter's option were X" without touching
``pipelines.yaml``. The changed steps are built exactly as the loader builds them:
the plugin's options dataclass validates the merged options, so a bad override is
refused with the same message a bad ``pipelines.yaml`` would get.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from cortex.pipeline.config import Pipeline, PipelineConfigError, Step
from cortex.plugins.base import OptionsError, build_options


def step_options(step: Step) -> dict[str, Any]:
    """The step's resolved options as plain data (``{}`` for a plugin without any)."""
    options = step.plugin.options
    if not dataclasses.is_dataclass(options):
        return {}
    return {f.name: _plain(getattr(options, f.name)) for f in dataclasses.fields(options)}


def _plain(value: Any) -> Any:
    """Tuples as lists and mappings as dicts, so the value is JSON and YAML again."""
    if isinstance(value, tuple | list | frozenset | set):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def with_overrides(pipeline: Pipeline, options: Mapping[str, Mapping[str, Any]] | None = None,
                   multipliers: Mapping[str, float] | None = None) -> Pipeline:
    """``pipeline`` with ``options`` merged into the named steps and ``multipliers`` set.

    ``options`` maps a step name to the options to change (the others keep their
    configured values); ``multipliers`` maps a weigher's name to its new multiplier.
    Raises PipelineConfigError naming the step for an unknown step, a multiplier on a
    filter, an option the plugin does not have or a value of the wrong type.
    """
    options, multipliers = dict(options or {}), dict(multipliers or {})
    names = {s.name for s in pipeline.filters + pipeline.weighers}
    unknown = sorted((set(options) | set(multipliers)) - names)
    if unknown:
        raise PipelineConfigError(f"pipeline {pipeline.name} has no step {', '.join(unknown)}")
    filters = tuple(_changed(s, options.get(s.name), None) for s in pipeline.filters)
    if any(s.name in multipliers for s in pipeline.filters):
        raise PipelineConfigError("a multiplier can only be given to a weigher")
    weighers = tuple(_changed(s, options.get(s.name), multipliers.get(s.name))
                     for s in pipeline.weighers)
    return dataclasses.replace(pipeline, filters=filters, weighers=weighers)


def _changed(step: Step, options: Mapping[str, Any] | None, multiplier: Any) -> Step:
    """One step rebuilt with merged options and/or a new multiplier (itself if neither)."""
    if options is None and multiplier is None:
        return step
    if multiplier is not None and (isinstance(multiplier, bool)
                                   or not isinstance(multiplier, int | float)
                                   or not math.isfinite(multiplier)):
        raise PipelineConfigError(f"step {step.name}: multiplier must be a finite number")
    plugin = step.plugin
    if options is not None:
        if not isinstance(options, Mapping):
            raise PipelineConfigError(f"step {step.name}: options must be an object")
        try:
            built = build_options(type(plugin), step_options(step) | dict(options))
        except OptionsError as exc:
            raise PipelineConfigError(f"step {step.name}: {exc}") from None
        plugin = type(plugin)(built)
    return dataclasses.replace(step, plugin=plugin, multiplier=float(
        step.multiplier if multiplier is None else multiplier))
