"""``POST /v1/scheduler/<service>/simulate``: run a pipeline on a body, show every step.

The body is the one the external endpoint takes. What to change for the simulation
comes from the query string or from a ``simulate`` object in the body (the query
wins): ``pipeline`` (another pipeline of the service), per-step ``options`` and
per-weigher ``multipliers`` (see cortex.pipeline.overrides), and ``record`` (write
a decision with outcome ``simulated``; default: record nothing). Query spelling::

    ?pipeline=NAME&record=true&multiplier.STEP=2.5&option.STEP.KEY=JSON

An ``option.`` value is read as JSON when it parses (``4``, ``true``, ``["a"]``),
else as a plain string. The answer is JSON: the hosts, every step's record, the
final weights and the explanation (cortex.pipeline.explain). Nothing is counted
in the scheduler metrics: simulations are not calls from Nova, Cinder or Manila.
"""

from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass, field
from typing import Any

from flask import current_app, jsonify, request
from jsonschema import Draft202012Validator

from cortex.api.body import query_flag, read_json_body
from cortex.api.errors import ApiError
from cortex.api.scheduler import parse, run
from cortex.api.schema import load_openapi
from cortex.pipeline.explain import explain
from cortex.scheduler.service import simulation


@dataclass
class Simulation:
    """What an operator asked to change: pipeline name, step options, multipliers."""

    pipeline: str | None = None
    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    multipliers: dict[str, Any] = field(default_factory=dict)
    record: bool = False


@functools.cache
def _settings_validator() -> Draft202012Validator:
    """Validator of the body's ``simulate`` object (``SimulationSettings`` in openapi.yaml)."""
    return Draft202012Validator(load_openapi()["components"]["schemas"]["SimulationSettings"])


def _json_value(text: str) -> Any:
    """A query value as JSON when it is JSON (NaN and Infinity are not), else the text."""
    def refuse(name: str) -> Any:
        raise ValueError(name)
    try:
        return json.loads(text, parse_constant=refuse)
    except ValueError:
        return text


def settings(body: Any, args: Any) -> Simulation:
    """The Simulation of the body's ``simulate`` object overlaid with the query ``args``.

    Raises ApiError 400 for a malformed ``simulate`` object, an unknown query
    parameter, a malformed ``multiplier.``/``option.`` name or a non-number multiplier.
    """
    given = body.get("simulate", {}) if isinstance(body, dict) else {}
    error = next(iter(_settings_validator().iter_errors(given)), None)
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path)
        raise ApiError(400, f"simulate{'/' + where if where else ''}: {error.message[:200]}")
    found = Simulation(given.get("pipeline"), {k: dict(v) for k, v in
                                               given.get("options", {}).items()},
                       dict(given.get("multipliers", {})), given.get("record", False))
    for name, value in args.items(multi=True):
        _query_setting(found, name, value)
    return found


def _query_setting(found: Simulation, name: str, value: str) -> None:
    """Apply one query parameter to ``found``."""
    kind, _, rest = name.partition(".")
    if name == "pipeline":
        if not value:
            raise ApiError(400, "pipeline must name a pipeline (empty: leave it out)")
        found.pipeline = value
    elif name == "record":
        found.record = query_flag(name, value)
    elif kind == "multiplier" and rest:
        number = _json_value(value)
        if isinstance(number, bool) or not isinstance(number, int | float):
            raise ApiError(400, f"{name} must be a number, not {value[:40]!r}")
        found.multipliers[rest] = number
    elif kind == "option" and rest.count(".") >= 1 and all(rest.split(".", 1)):
        step, key = rest.split(".", 1)
        found.options.setdefault(step, {})[key] = _json_value(value)
    else:
        raise ApiError(400, f"unknown query parameter {name[:60]!r} (known: pipeline, record, "
                            "multiplier.STEP, option.STEP.KEY)")


def simulate(service: str):
    """``POST /v1/scheduler/<service>/simulate``: the full step-by-step result as JSON."""
    services = current_app.extensions["cortex"]
    started = time.perf_counter()
    body = read_json_body()
    wanted = settings(body, request.args)
    options = simulation(wanted.pipeline, wanted.options, wanted.multipliers,
                         record=wanted.record)
    decision = run(services, parse(services, service, body), options, started)
    choice = dict(decision.pipeline_choice) if decision.pipeline_choice else None
    return jsonify(hosts=list(decision.result), pipeline=decision.pipeline,
                   pipeline_choice=choice, service=service,
                   intent=decision.intent, resource_id=decision.resource_id,
                   knowledge_version=decision.knowledge_version, overrides=options.overrides,
                   steps=[s.as_dict() for s in decision.steps],
                   final_weights=dict(decision.final_weights),
                   unknown_hosts=list(decision.unknown_hosts), explanation=explain(decision),
                   recorded=wanted.record, decision_id=decision.id)
