"""Nova's isolation rules: tenant-isolated aggregates, image-property aggregates, isolated hosts.

Sources (Nova 34, read for the facts): ``aggregate_multitenancy_isolation.py``,
``aggregate_image_properties_isolation.py``, ``isolated_hosts_filter.py`` and
``utils.aggregate_metadata_get_by_host`` of ``nova/scheduler/filters``. Aggregate
metadata are read as Nova reads them: ``{key: set of values}`` over every aggregate of
the host, each value split at commas and stripped (an empty value is the value ``""``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

TENANT_PREFIX = "filter_tenant_id"


def host_metadata(aggregates: Iterable[Any]) -> dict[str, set[str]]:
    """``{key: values}`` of the aggregates' metadata (``aggregate.metadata``), values split."""
    metadata: dict[str, set[str]] = {}
    for aggregate in aggregates:
        for key, value in aggregate.metadata.items():
            metadata.setdefault(key, set()).update(v.strip() for v in str(value).split(","))
    return metadata


def isolating_tenants(metadata: Mapping[str, set[str]]) -> frozenset[str]:
    """The values of every ``filter_tenant_id*`` key: the only projects the host serves.

    Empty: the host serves every project. A key whose value is empty isolates the host
    for the project ``""``, i.e. for none (Nova keeps the empty value).
    """
    return frozenset().union(*(v for k, v in metadata.items() if k.startswith(TENANT_PREFIX)))


def tenant_refusal(tenants: frozenset[str], project: str | None) -> str | None:
    """Why ``project`` may not use a host isolated for ``tenants``, or None."""
    if not tenants or project in tenants:
        return None
    shown = ", ".join(sorted(t or '""' for t in tenants)[:3])
    return f"host is isolated for project(s) {shown}"


def image_property_refusal(metadata: Mapping[str, set[str]], image: Mapping[str, Any],
                           namespace: str | None = None, separator: str = ".") -> str | None:
    """AggregateImagePropertiesIsolation's reason to refuse a host, or None.

    A metadata key naming an image property the image sets (to a true value) must list
    that value (``str(value)``). ``image``: the image's properties by Nova's field
    names (keys that are no image property never match one). ``namespace``: only keys
    ``<namespace><separator>...`` are read (Nova's
    ``aggregate_image_properties_isolation_namespace``; such keys then never name a
    property, as in Nova).
    """
    for key, options in metadata.items():
        if namespace and not key.startswith(namespace + separator):
            continue
        value = image.get(key)
        if value and str(value) not in options:
            return f"image {key}={value} is not among the aggregate's {sorted(options)[:3]}"
    return None


def isolated_hosts_refusal(host: str, image_id: str | None, isolated_hosts: Iterable[str],
                           isolated_images: Iterable[str], restrict: bool) -> str | None:
    """IsolatedHostsFilter's reason to refuse ``host`` for ``image_id``, or None.

    Isolated images run only on isolated hosts; with ``restrict``, isolated hosts run
    only isolated images (and, with no isolated image listed, none).
    """
    images = frozenset(isolated_images)
    host_isolated = host in frozenset(isolated_hosts)
    if not images:
        return "isolated host, no isolated image" if restrict and host_isolated else None
    image_isolated = image_id in images
    if image_isolated and not host_isolated:
        return f"image {image_id} runs on isolated hosts only"
    if restrict and host_isolated and not image_isolated:
        return "isolated host, the image is not isolated"
    return None
