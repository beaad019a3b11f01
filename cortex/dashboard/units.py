"""Numbers as the dashboard prints them: quantities in their unit, round axis maxima."""

from __future__ import annotations

import itertools

#: Binary units above the unit Placement counts a resource class in (MiB, GiB).
_BINARY_UNITS = {"MEMORY_MB": ("MiB", "GiB", "TiB", "PiB"), "DISK_GB": ("GiB", "TiB", "PiB")}
#: Names of counted resource classes, singular and plural.
_COUNTS = {"VCPU": ("vCPU", "vCPUs"), "PCPU": ("CPU", "CPUs")}


def quantity(value: float, resource_class: str) -> str:
    """``value`` units of ``resource_class`` for people: the Jinja filter ``quantity``.

    The input is in Placement's unit of the class: ``MEMORY_MB`` in MiB, ``DISK_GB``
    (and Cinder/Manila pool capacities) in GiB, ``VCPU`` and ``PCPU`` in CPUs. Memory
    and disk come out in the largest binary unit (steps of 1024) that keeps the number
    at 1 or more, with two decimals under 10, one under 100, none above, trailing zeros
    dropped (2031616 MiB -> ``1.94 TiB``, 524288 MiB -> ``512 GiB``); CPUs as a count
    (``64 vCPUs``, ``1 CPU``); any other class (GPUs, custom classes) as a plain number
    (``8``, ``2.5``), never in exponent notation. Negative values (an overcommitted
    ``free``) keep their sign. Never raises for a number.
    """
    units = _BINARY_UNITS.get(resource_class)
    if units is None:
        count = _decimals(value, 2)
        if resource_class not in _COUNTS:
            return count
        singular, plural = _COUNTS[resource_class]
        return f"{count} {singular if value == 1 else plural}"
    size, unit = abs(value), units[0]
    for unit in units:
        if size < 1024 or unit == units[-1]:
            break
        size /= 1024
    digits = 0 if size >= 100 else 1 if size >= 10 else 2
    return f"{'-' if value < 0 else ''}{_decimals(size, digits)} {unit}"


def _decimals(value: float, digits: int) -> str:
    """``value`` with ``digits`` decimals, trailing zeros (and a bare point) dropped."""
    text = f"{value:.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def nice_ceiling(value: int) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50, ... that is at least ``value`` (1 for 0)."""
    nice, factors = 1, itertools.cycle((2, 2.5, 2))
    while nice < value:
        nice = round(nice * next(factors))
    return nice
