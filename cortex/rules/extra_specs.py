"""Extra-spec operators of Nova, Cinder and Manila, in one matcher shared by four filters.

Source: ``extra_specs_ops.py`` of ``nova/scheduler/filters``, ``cinder/scheduler/filters``
and ``manila/scheduler/filters``, and the scope rules of Nova's
ComputeCapabilitiesFilter/AggregateInstanceExtraSpecsFilter and Cinder's/Manila's
CapabilitiesFilter. A requirement is a string whose first word may be an operator:

=========================  ===============================================================
``= N``                    numeric ``value >= N`` (Nova's historical meaning of ``=``)
``== N``, ``!= N``         numeric equal, not equal
``>= N``, ``<= N``         numeric comparisons
``s== S`` ... ``s>= S``    string comparisons (``s==``, ``s!=``, ``s<``, ``s<=``, ``s>``, ``s>=``)
``<in> S``                 S is a substring of the value (an element, when the value is a list)
``<all-in> A B ...``       every word is in the value (elements, when the value is a list)
``<or> A <or> B ...``      the value equals one of the words
``<is> True|False``        the value, read as a boolean, is that boolean (Cinder, Manila)
=========================  ===============================================================

Without an operator the value must equal the whole requirement: a boolean value is
compared with the requirement read as a boolean (Cinder, Manila), any other value as
a string (Nova compares ``str(value)``). Lists: Cinder, Manila and Nova's aggregate
filter try each element (``unmet(..., any_element=True)``); for a list-valued host
capability (``cpu_info:features``) ``<in>``/``<all-in>`` test membership in the list,
where Nova searches the list's printed form (so ``<in> avx`` would also match
``avx512f`` there). A value that is not a number under a numeric operator, a missing
value, and an operator without an operand do not match (Nova's ``match`` returns False
for the last two and raises for the first).
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

_TRUE = frozenset({"1", "t", "true", "on", "y", "yes"})


def as_bool(value: Any) -> bool:
    """Read a boolean as oslo's ``bool_from_string`` does: ``True``, ``"true"``, ``"1"``..."""
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in _TRUE


def _numeric(compare: Callable[[float, float], bool]) -> Callable[[Any, str], bool]:
    """A numeric comparison that is False for values that are not numbers."""
    def check(value: Any, operand: str) -> bool:
        try:
            return compare(float(value), float(operand))
        except (TypeError, ValueError):
            return False
    return check


def _string(compare: Callable[[str, str], bool]) -> Callable[[Any, str], bool]:
    """A string comparison on ``str(value)``."""
    return lambda value, operand: compare(str(value), operand)


OPERATORS: dict[str, Callable[[Any, str], bool]] = {
    "=": _numeric(operator.ge),
    "==": _numeric(operator.eq),
    "!=": _numeric(operator.ne),
    ">=": _numeric(operator.ge),
    "<=": _numeric(operator.le),
    "s==": _string(operator.eq),
    "s!=": _string(operator.ne),
    "s<": _string(operator.lt),
    "s<=": _string(operator.le),
    "s>": _string(operator.gt),
    "s>=": _string(operator.ge),
    "<in>": lambda value, operand: operand in (value if _is_list(value) else str(value)),
    "<is>": lambda value, operand: as_bool(value) == as_bool(operand),
}


def _is_list(value: Any) -> bool:
    return isinstance(value, list | tuple | set | frozenset)


def match(value: Any, requirement: str) -> bool:
    """Whether ``value`` (a capability or metadata value) meets ``requirement`` (an extra spec)."""
    words = str(requirement).split()
    op = words.pop(0) if words else None
    if op not in OPERATORS and op not in ("<or>", "<all-in>"):
        if _is_list(value):
            return any(match(v, requirement) for v in value)
        if isinstance(value, bool):
            return value == as_bool(requirement)
        return value is not None and str(value) == requirement
    if value is None or not words:
        return False
    if op == "<all-in>":
        return all(w in (value if _is_list(value) else str(value)) for w in words)
    if _is_list(value) and op != "<in>":
        return any(match(v, requirement) for v in value)
    if op == "<or>":
        return str(value) in words[0::2]
    return OPERATORS[op](value, words[0])


def lookup(capabilities: Mapping[str, Any], path: Sequence[str]) -> Any:
    """The value at ``path`` in nested capabilities; None when any step is missing.

    JSON strings on the way are decoded, as Nova does for ``cpu_info``.
    """
    value: Any = capabilities
    for key in path:
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                return None
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
        if value is None:
            return None
    return value


def unmet(extra_specs: Mapping[str, str], capabilities: Mapping[str, Any], scope: str, *,
          unscoped: str = "check", nested: bool = True, any_element: bool = False,
          ignored: frozenset[str] = frozenset(),
          fold_case: frozenset[str] = frozenset()) -> str | None:
    """The first extra spec of ``scope`` that ``capabilities`` does not meet, as a reason.

    Keys ``<scope>:<path>`` are checked; keys of other scopes are skipped. Unscoped keys
    (no ``:``) are checked (``unscoped="check"``: Cinder, Manila, Nova's aggregate
    filter), checked only when the capability exists (``"if-present"``: Nova's
    ComputeCapabilitiesFilter) or skipped (``"skip"``). ``nested``: ``a:b`` walks into
    ``capabilities["a"]["b"]``; otherwise the rest of the key is one name (Nova's
    aggregate filter). ``any_element``: a list value meets the spec when one element
    does. ``ignored`` keys are skipped; for keys in ``fold_case`` value and requirement
    compare case-insensitively. A missing capability fails the spec.
    """
    for key, requirement in extra_specs.items():
        if key in ignored:
            continue
        head, sep, rest = key.partition(":")
        if sep and head != scope:
            continue
        name = rest if sep else key
        path = name.split(":") if nested else [name]
        value = lookup(capabilities, path)
        if not sep and unscoped != "check" and (unscoped == "skip" or value is None):
            continue
        if value is None:
            return f"no capability {name} for {key}={requirement}"
        if name in fold_case:
            value, requirement = _folded(value), str(requirement).lower()
        values = value if any_element and _is_list(value) else [value]
        if not any(match(v, requirement) for v in values):
            return f"{name}={_shown(value)} does not meet {key}={requirement}"
    return None


def _folded(value: Any) -> Any:
    """``value`` lower-cased (elementwise for lists)."""
    if _is_list(value):
        return [str(v).lower() for v in value]
    return str(value).lower()


def _shown(value: Any) -> str:
    """A short printable form of a capability value for reasons."""
    text = ",".join(sorted(map(str, value))) if _is_list(value) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."
