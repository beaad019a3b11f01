"""The OpenAPI document of the service and validation of request bodies against it."""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable, Iterable
from importlib import resources
from typing import Any

import jsonschema_rs
import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import WEAK_MATCHES, ValidationError, relevance
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

#: Services with a ``POST /scheduler/<service>/external`` endpoint.
SERVICES = ("nova", "cinder", "manila")

#: At most this many messages are returned for one body.
MAX_MESSAGES = 5

# URI under which the document is registered, so that "#/components/schemas/X" resolves.
_DOCUMENT_URI = "urn:cortex:openapi"
_RESPONSE_POINTER = "/components/schemas/SchedulerResponse"
_TOPOLOGY_POINTER = "/components/schemas/TopologyReport"
_COMMITMENT_POINTER = "/components/schemas/CommitmentCreate"
# Envelope keys left out of the paths in messages ("spec.flavor.vcpus", not
# "spec.nova_object.data.flavor.nova_object.data.vcpus") unless the error is about them.
_ENVELOPE_DATA_KEYS = frozenset({"nova_object.data", "versioned_object.data"})
# Keywords whose values are data, not schemas: never look for "$ref" in them.
_DATA_KEYWORDS = frozenset({"const", "default", "enum", "example", "examples"})
_MAX_REPR = 80
_MAX_MESSAGE = 300
#: Characters no name (host, hypervisor host, weight key, request id) may hold: C0 and C1
#: controls with DEL (the document's ``NAME_PATTERN``), and lone surrogates, which the
#: JSON text can spell (``"\\ud800"``) but UTF-8 and PostgreSQL cannot store. json.loads
#: joins every valid surrogate pair, so a surrogate left in a decoded str is a lone one.
_NOT_IN_NAMES = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
#: Bits of the largest integer a JSON number may hold here: a double's range (RFC 8259
#: section 6: beyond it, implementations disagree on the value).
_MAX_INT_BITS = sys.float_info.max_exp  # 1024: |n| < 2**1024 ~ 1.8e308
#: The document's patterns that only forbid control characters (C0, DEL and, but for the
#: last, C1), each with the length it still asks of a string that holds none.
_CONTROL_PATTERNS = {r"^[^\x00-\x1f\x7f-\x9f]+$": 1, r"^[^\x00-\x1f\x7f-\x9f]*$": 0,
                     r"^[^\x00-\x1f\x7f]*$": 0}


@functools.cache
def load_openapi() -> dict:
    """Return the service's OpenAPI 3.1 document (``cortex/api/openapi.yaml``) as a dict.

    Read from the installed package once per process and cached: callers share the same
    dict and must not modify it (``copy.deepcopy`` it first if they need to).
    """
    text = (resources.files("cortex.api") / "openapi.yaml").read_text(encoding="utf-8")
    # libyaml's loader where PyYAML has it: the pure-Python parse took ~0.35 s of CPU
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506


class RequestValidator:
    """Validates scheduler request bodies (and answers) against the OpenAPI document.

    Built once per application from the document (``RequestValidator(load_openapi())``):
    one Draft 2020-12 validator per service, taken from the ``application/json`` request
    schema of ``POST /scheduler/<service>/external``, with ``$ref``s resolved inside the
    document. Formats are not asserted. A missing path or a dangling schema reference
    fails here, at construction, not on the first request.
    """

    def __init__(self, document: dict) -> None:
        """Prepare one validator per service and one for the answer.

        Raises ``referencing.exceptions.Unresolvable`` when the document lacks a scheduler
        path or a schema that is referenced.

        Speed: jsonschema needs about 60 ms for a body with 1,000 hosts, so each request
        schema is also compiled by jsonschema-rs (Rust, the same Draft 2020-12; about
        0.1 ms for that body). The compiled check decides the common case, a valid body;
        a body it rejects, or cannot take (a value Rust's JSON has no room for), is
        validated again by jsonschema, which writes the messages and has the last word.
        A differential test over every bundled and mutated body keeps the two agreeing.
        """
        resource = Resource.from_contents(document, default_specification=DRAFT202012)
        registry = Registry().with_resource(_DOCUMENT_URI, resource)
        inlined: dict[str, Any] = {}
        self._requests = {
            service: _validator(registry, _request_pointer(service), inlined)
            for service in SERVICES
        }
        self._response = _validator(registry, _RESPONSE_POINTER, inlined)
        self._topology = _validator(registry, _TOPOLOGY_POINTER, inlined)
        self._commitment = _validator(registry, _COMMITMENT_POINTER, inlined)
        self._kubernetes = {name: _validator(registry, f"/components/schemas/{name}", inlined)
                            for name in ("ExtenderArgs", "ExtenderBindingArgs")}
        self._fast = {service: _compiled(document, _request_pointer(service))
                      for service in SERVICES}
        self._fast_plain = {service: _compiled(document, _request_pointer(service), plain=True)
                            for service in SERVICES}

    def errors(self, service: str, body: object, finite_numbers: bool = False,
               plain_names: bool = False) -> list[str]:
        """Return why ``body`` is not a valid request for ``service``; ``[]`` if it is.

        ``body`` is the decoded JSON body of ``POST /scheduler/<service>/external``;
        ``finite_numbers``: its reader saw every number and none is beyond a double's
        range (:func:`cortex.api.body.read_json_body`), so they need no second look;
        ``plain_names``: no string in it can hold a control character or a lone surrogate
        (:func:`cortex.jsontext.may_hold_unnamable` said no of its text), so no name can
        fail the names' pattern, half the compiled check's time for a body with 10,000
        hosts, and the compiled check leaves it out.
        Messages look like ``"spec.flavor.vcpus: 'abc' is not of type 'integer'"``: the
        path inside the body (envelope ``*.data`` keys left out), then what is wrong.
        The most relevant come first (shallowest problem first; inside an ``anyOf`` such as
        the envelope-or-plain wrappers, the branch that got deepest into the body), at most
        :data:`MAX_MESSAGES`. Raises ``ValueError`` for a service not in :data:`SERVICES`.
        """
        try:
            validator = self._requests[service]
            fast = (self._fast_plain if plain_names else self._fast)[service]
        except KeyError:
            raise ValueError(f"unknown service {service!r}, expected one of {SERVICES}") from None
        try:
            if fast(body):
                # Valid for jsonschema-rs, the names hold no control character (the
                # document's name pattern, or plain_names) and no lone surrogate (a name
                # the pattern read was converted to Rust's UTF-8, or plain_names), so only
                # the numbers can be poison.
                return [] if finite_numbers else _bad_numbers(body)[:MAX_MESSAGES]
        except ValueError:  # not convertible to Rust's JSON values: let jsonschema judge
            pass
        return _messages(validator.iter_errors(body)) or poison_errors(body)

    def response_errors(self, body: object) -> list[str]:
        """Return why ``body`` is not an answer the callers accept; ``[]`` if it is.

        Checks against ``SchedulerResponse``, the callers' own response schema
        (``{"hosts": [str, ...]}``, nothing else). Same message format as :meth:`errors`.
        """
        return _messages(self._response.iter_errors(body))


    def topology_errors(self, body: object) -> list[str]:
        """Return why ``body`` is not a ``TopologyReport`` (``POST /v1/topology/<host>``).

        Same message format as :meth:`errors`; ``[]`` when it is one. Numbers out of a
        double's range are refused as in :func:`poison_errors`.
        """
        return _messages(self._topology.iter_errors(body)) or poison_errors(body)


    def commitment_errors(self, body: object) -> list[str]:
        """Why ``body`` is not a ``CommitmentCreate`` (``POST /v1/commitments``); ``[]`` if it is.

        Same message format as :meth:`errors`. Besides the schema (whose patterns refuse
        control characters in the texts), a lone surrogate in ``project_id``,
        ``availability_zone`` or ``description`` is refused: UTF-8, and so PostgreSQL
        and every reader of the stored commitment, cannot hold it.
        """
        found = _messages(self._commitment.iter_errors(body)) or poison_errors(body)
        if found or not isinstance(body, dict):
            return found
        return [f"{key}: {error}" for key in ("project_id", "availability_zone", "description")
                if isinstance(body.get(key), str) and (error := name_error(body[key]))]

    def extender_errors(self, schema: str, body: object) -> list[str]:
        """Why ``body`` is not kube-scheduler's ``schema``; ``[]`` if it is.

        ``schema``: ``ExtenderArgs`` or ``ExtenderBindingArgs``, the body's keys already in
        the Go field names (:func:`cortex.request.kubernetes.canonical`). Same message
        format as :meth:`errors`.
        """
        return _messages(self._kubernetes[schema].iter_errors(body)) or poison_errors(body)


def name_error(name: str) -> str | None:
    """Why ``name`` (a host name, a request id) is refused, or None when it is fine.

    Refused: C0/C1 control characters and DEL (NUL among them: PostgreSQL text cannot
    hold it) and lone surrogates (not UTF-8). The message names the code point.
    """
    found = _NOT_IN_NAMES.search(name)
    if found is None:
        return None
    return f"holds the character U+{ord(found.group()):04X} (control or lone surrogate)"


def poison_errors(body: object) -> list[str]:
    """What a schema-valid body holds that no caller can mean; ``[]`` when nothing.

    - a number that is not finite: ``1e999`` and ``-1e999`` (json.loads makes them
      infinities; ``NaN``/``Infinity`` are not JSON and fail earlier), or an integer of
      2**1024 or more in magnitude (beyond a double: a weight of 401 digits, which
      ``float()`` cannot take);
    - in a name: the candidates' ``host`` and ``hypervisor_hostname``, the ``weights``
      keys, ``context.request_id`` and ``context.global_request_id``, a lone surrogate
      (control characters there already fail the document's name pattern).

    Messages name the place (``weights.cmp0001: ...``), at most :data:`MAX_MESSAGES`.
    About 1.5 ms for a 1,000-host Nova body. Any other string may hold anything:
    the decision writer stores NUL and lone surrogates as U+FFFD
    (:func:`cortex.store.decisions.storable`).
    """
    messages = _bad_numbers(body)
    if isinstance(body, dict) and _NOT_IN_NAMES.search("".join(_names(body))):
        for where, name in _named(body):  # only when some name is bad: say which
            problem = name_error(name)
            if problem:
                messages.append(f"{where}: {name[:_MAX_REPR]!r} {problem}")
    return messages[:MAX_MESSAGES]


def _names(body: dict) -> list[str]:
    """Every str name :func:`poison_errors` checks in ``body``, without places (fast)."""
    hosts = body.get("hosts")
    candidates = [c for c in (hosts if isinstance(hosts, list) else ()) if isinstance(c, dict)]
    weights = body.get("weights")
    context = body.get("context")
    names = [c.get("host") for c in candidates]
    names += [c.get("hypervisor_hostname") for c in candidates]
    names += list(weights) if isinstance(weights, dict) else []
    if isinstance(context, dict):
        names += [context.get("request_id"), context.get("global_request_id")]
    return [name for name in names if isinstance(name, str)]


def _named(body: dict) -> list[tuple[str, str]]:
    """``(where, name)`` for the names of :func:`_names`."""
    places: list[tuple[str, object]] = []
    hosts = body.get("hosts")
    for index, candidate in enumerate(hosts if isinstance(hosts, list) else ()):
        if isinstance(candidate, dict):
            places += [(f"hosts[{index}].{key}", candidate.get(key))
                       for key in ("host", "hypervisor_hostname")]
    weights = body.get("weights")
    places += [("weights", key) for key in (weights if isinstance(weights, dict) else ())]
    context = body.get("context")
    if isinstance(context, dict):
        places += [(f"context.{key}", context.get(key))
                   for key in ("request_id", "global_request_id")]
    return [(where, name) for where, name in places if isinstance(name, str)]


def _bad_numbers(body: object) -> list[str]:
    """Messages for the non-finite floats and too large integers in ``body``.

    A first walk without paths decides (the common case: nothing found); only then a
    second one finds where.
    """
    stack = [body]
    while stack:
        value = stack.pop()
        kind = type(value)
        if kind is dict:
            stack.extend(value.values())  # type: ignore[union-attr]
        elif kind is list:
            stack.extend(value)  # type: ignore[arg-type]
        elif (kind is float and value - value != 0.0  # inf - inf and nan - nan are nan
              or kind is int and value.bit_length() > _MAX_INT_BITS):  # type: ignore[union-attr]
            return _number_messages(body)
    return []


def _number_messages(body: object) -> list[str]:
    """:func:`_bad_numbers`'s messages, with the path of each value."""
    pending: list[tuple[object, tuple[str | int, ...]]] = [(body, ())]
    found: list[str] = []
    while pending and len(found) < MAX_MESSAGES:
        value, path = pending.pop()
        if isinstance(value, dict):
            pending.extend((v, (*path, k)) for k, v in value.items())
        elif isinstance(value, list):
            pending.extend((v, (*path, i)) for i, v in enumerate(value))
        elif isinstance(value, float) and value - value != 0.0:
            found.append(f"{_where(list(path))}: {value!r} is not a finite number")
        elif type(value) is int and value.bit_length() > _MAX_INT_BITS:
            found.append(f"{_where(list(path))}: an integer of {len(str(abs(value)))} "
                         "digits is beyond a double's range")
    return found


def _compiled(document: dict, pointer: str, plain: bool = False) -> Callable[[Any], bool]:
    """The compiled (jsonschema-rs) check of the schema at ``pointer``: ``is_valid``.

    ``$ref``s are kept and resolved against the document's ``components``; formats are
    not asserted and nothing is fetched. The returned callable answers True or False,
    and raises ``ValueError`` for a value it cannot convert (a dict key that is no str).
    ``plain``: the check of a body none of whose strings holds a control character, the
    control-character patterns replaced by what they ask of such a string
    (:func:`without_control_patterns`).
    """
    node: Any = document
    for part in pointer.strip("/").split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    schema = {**node, "components": document["components"]}
    if plain:
        schema = without_control_patterns(schema)
    return jsonschema_rs.Draft202012Validator(schema, validate_formats=False,
                                              offline=True).is_valid


def without_control_patterns(schema: Any) -> Any:
    r"""A copy of ``schema`` where every pattern that only forbids control characters is gone.

    Such a pattern (:data:`_CONTROL_PATTERNS`) says of a string without control characters
    only that it is not empty, or nothing: ``{"type": "string", "pattern":
    "^[^\x00-\x1f\x7f-\x9f]+$"}`` becomes ``{"type": "string", "minLength": 1}``.
    Every other pattern stays, and values that are data (``const``, ``enum``, examples)
    are copied as they are. The copy accepts what ``schema`` accepts of every document
    whose strings hold no control character, and only then may it stand for it.
    """
    if isinstance(schema, list):
        return [without_control_patterns(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    copied = {key: value if key in _DATA_KEYWORDS else without_control_patterns(value)
              for key, value in schema.items()}
    pattern = copied.get("pattern")
    if isinstance(pattern, str) and pattern in _CONTROL_PATTERNS:
        del copied["pattern"]
        least = max(copied.get("minLength", 0), _CONTROL_PATTERNS[pattern])
        if least:
            copied["minLength"] = least
    return copied


def _request_pointer(service: str) -> str:
    """JSON pointer to the request body schema of ``POST /scheduler/<service>/external``."""
    path = f"/scheduler/{service}/external".replace("~", "~0").replace("/", "~1")
    return f"/paths/{path}/post/requestBody/content/application~1json/schema"


def _validator(registry: Registry, pointer: str, inlined: dict[str, Any]) -> Draft202012Validator:
    """A validator for the schema at ``pointer`` in the registered document.

    The ``$ref``s are resolved through ``registry`` now and inlined (each target once,
    shared through ``inlined``), which makes validating a body with a thousand hosts about
    twice as fast; a reference that would recurse is kept, made absolute, and resolved by
    the same registry at validation time.
    """
    lookup = registry.resolver(_DOCUMENT_URI).lookup
    schema = _inline({"$ref": f"#{pointer}"}, lookup, inlined, ())
    return Draft202012Validator(schema, registry=registry)


def _inline(
    schema: Any, lookup: Callable[[str], Any], inlined: dict[str, Any], seen: tuple[str, ...]
) -> Any:
    """``schema`` with every ``$ref`` replaced by its target (found by ``lookup``).

    ``inlined`` caches the inlined target per absolute reference; ``seen`` holds the
    references being inlined (a cycle keeps its ``$ref``). A ``$ref`` with sibling keywords
    becomes ``allOf`` the target, which is what 2020-12 means by it. Raises
    ``referencing.exceptions.Unresolvable`` for a dangling reference.
    """
    if isinstance(schema, list):
        return [_inline(item, lookup, inlined, seen) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result = {
        key: value if key in _DATA_KEYWORDS else _inline(value, lookup, inlined, seen)
        for key, value in schema.items()
        if key != "$ref"
    }
    ref = schema.get("$ref")
    if not isinstance(ref, str):
        return result if ref is None else {**result, "$ref": ref}
    uri = ref if ":" in ref.split("#", 1)[0] else f"{_DOCUMENT_URI}{ref}"
    if uri in seen:
        target = {"$ref": uri}
    elif uri in inlined:
        target = inlined[uri]
    else:
        target = inlined[uri] = _inline(lookup(uri).contents, lookup, inlined, (*seen, uri))
    if not result:
        return target
    return {**result, "allOf": [*result.get("allOf", []), target]}


def _messages(errors: Iterable[ValidationError]) -> list[str]:
    """Short messages for ``errors``, most relevant first, deduplicated, at most five."""
    messages: list[str] = []
    for error in sorted(errors, key=_rank):
        for leaf in _leaves(error):
            message = _format(leaf)
            if message not in messages:
                messages.append(message)
            if len(messages) >= MAX_MESSAGES:
                return messages
    return messages


def _rank(error: ValidationError) -> tuple[Any, ...]:
    """Sort key: shallow problems first, combinators after plain keywords, then by path."""
    return (len(error.path), error.validator in WEAK_MATCHES, [str(p) for p in error.path])


def _leaves(error: ValidationError) -> list[ValidationError]:
    """The errors worth reporting for ``error``.

    For an ``anyOf``/``oneOf`` failure, "not valid under any of the given schemas" says
    little: take the branch whose error reaches deepest into the body (for an envelope
    wrapper, the branch matching the form the caller used), and report that branch's
    errors instead, recursively. On a tie the earlier branch wins.
    """
    if not error.context:
        return [error]
    best = min(error.context, key=relevance)  # deepest first; ties keep schema order
    rest = [e for e in error.context if e is not best and _branch(e) == _branch(best)]
    leaves = _leaves(best)
    for other in sorted(rest, key=_rank):
        leaves.extend(_leaves(other))
    return leaves


def _branch(error: ValidationError) -> object:
    """Index of the ``anyOf``/``oneOf`` branch an error of its context comes from."""
    return error.relative_schema_path[0] if error.relative_schema_path else None


def _format(error: ValidationError) -> str:
    """``"<path>: <message>"`` with long instance reprs shortened."""
    message = error.message
    instance = repr(error.instance)
    if len(instance) > _MAX_REPR and message.startswith(instance):
        message = instance[: _MAX_REPR - 3] + "..." + message[len(instance) :]
    if len(message) > _MAX_MESSAGE:
        message = message[: _MAX_MESSAGE - 3] + "..."
    return f"{_where(list(error.absolute_path))}: {message}"


def _where(path: list[str | int]) -> str:
    """``spec.numa_topology.cells[0].id`` for a path into the body; ``body`` for the root."""
    text = ""
    for index, part in enumerate(path):
        if isinstance(part, int):
            text += f"[{part}]"
        elif part in _ENVELOPE_DATA_KEYS and index < len(path) - 1:
            continue
        else:
            text += f".{part}" if text else str(part)
    return text or "body"
