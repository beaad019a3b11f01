"""``GET /v1/capacity``: instances of a shape that fit in a zone, now and on the empty fleet.

Parses the query, calls :func:`cortex.services.capacity.placeable` and answers its
document (reader role). :func:`register` adds the route and the
``cortex_flavor_placeable_instances`` gauges
(:class:`cortex.services.capacity.FlavorCapacity`) to an app.
"""

from __future__ import annotations

import re
from typing import Any

from flask import Flask, current_app, jsonify, request

from cortex.api.errors import ApiError
from cortex.knowledge.cache import KnowledgeUnavailable
from cortex.scheduler.service import SchedulingFailed
from cortex.services import capacity as service
from cortex.services.capacity import (
    MAX_LIMIT,
    FlavorCapacity,
    FlavorUnknown,
    Shape,
    ShapeInvalid,
)

PATH = "/v1/capacity"
#: ``limit`` when the query names none: instances counted at most per fleet.
DEFAULT_LIMIT = 1000
_INTEGER = re.compile(r"^[0-9]{1,9}$")
_PRODUCTS = re.compile(r"^[0-9a-fA-F]{4}(,[0-9a-fA-F]{4})*$")


def _integer(name: str, default: int | None = None) -> int | None:
    """The query's ``name`` as a non-negative integer (``default`` when absent); 400 if not."""
    text = request.args.get(name)
    if text is None:
        return default
    if not _INTEGER.match(text):
        raise ApiError(400, f"{name} must be a non-negative integer")
    return int(text)


def shape_of(args: Any) -> Shape:
    """The Shape the query asks about (a synced ``flavor``, or ``vcpus`` and ``memory_mb``)."""
    products_text = args.get("products") or ""
    if products_text and not _PRODUCTS.match(products_text):
        raise ApiError(400, "products must be PCI product ids of 4 hex digits, comma-separated")
    products = tuple(p.lower() for p in products_text.split(",") if p)
    project = args.get("project_id") or None
    try:
        if args.get("flavor"):
            if len(args["flavor"]) > 255:
                raise ApiError(400, "flavor must be at most 255 characters")
            if any(args.get(k) is not None for k in ("vcpus", "memory_mb", "gpus", "products")):
                raise ApiError(400, "flavor names the shape: leave out vcpus, memory_mb, gpus "
                                    "and products")
            return service.flavor(current_app.extensions["cortex"].engine, args["flavor"],
                                  project)
        vcpus, memory = _integer("vcpus"), _integer("memory_mb")
        if vcpus is None or memory is None:
            raise ApiError(400, "vcpus and memory_mb are required (or a flavor)")
        return Shape(vcpus, memory, _integer("gpus", 0) or 0, products,
                     _integer("numa_nodes"), args.get("mem_page_size") or None, project)
    except ShapeInvalid as exc:
        raise ApiError(400, str(exc)) from None
    except FlavorUnknown as exc:
        raise ApiError(404, str(exc)) from None


def show_capacity():
    """``GET /v1/capacity?vcpus=&memory_mb=&gpus=&products=&availability_zone=...``.

    Also ``numa_nodes``, ``mem_page_size``, ``project_id``, ``flavor`` (a synced Nova
    flavor instead of the shape's values) and ``limit`` (instances counted at most per
    fleet, 1 to 100,000, default 1,000). Answers the document of
    :func:`cortex.services.capacity.placeable`. 400 for a value outside its bounds, a
    zone without hosts or no pipeline for the shape; 404 for an unknown flavor; 503
    without knowledge.
    """
    services = current_app.extensions["cortex"]
    shape = shape_of(request.args)
    limit = _integer("limit", DEFAULT_LIMIT)
    if limit is None or not 1 <= limit <= MAX_LIMIT:
        raise ApiError(400, f"limit must be an integer from 1 to {MAX_LIMIT}")
    zone = request.args.get("availability_zone") or None
    if zone is not None and len(zone) > 255:
        raise ApiError(400, "availability_zone must be at most 255 characters")
    try:
        found = service.placeable(services.scheduler, shape, zone, limit=limit,
                                  devices=services.devices)
    except ShapeInvalid as exc:
        raise ApiError(400, str(exc)) from None
    except SchedulingFailed as exc:
        raise ApiError(exc.status, exc.detail, exc.code) from None
    except KnowledgeUnavailable as exc:
        raise ApiError(503, f"knowledge unavailable: {exc}") from None
    return jsonify(found)


def _authorized_show():
    """The route's view: the reader role, then :func:`show_capacity`."""
    current_app.extensions["cortex"].authorizer.authorize("reader")
    return show_capacity()


def register(app: Flask) -> None:
    """Add ``GET /v1/capacity`` and the flavor capacity gauges to ``app`` (after its services).

    The gauges' :class:`FlavorCapacity` is kept in ``app.extensions`` under
    :data:`cortex.services.capacity.FLAVOR_CAPACITY` (the forecasts read it).
    """
    services = app.extensions["cortex"]
    app.add_url_rule(PATH, endpoint=PATH, view_func=_authorized_show, methods=["GET"],
                     provide_automatic_options=False)
    flavors = FlavorCapacity(services.scheduler, lambda: service.gpu_flavors(services.engine),
                             services.devices)
    app.extensions[service.FLAVOR_CAPACITY] = flavors
    services.metrics.add_scrape_collector(flavors)
