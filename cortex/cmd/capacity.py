"""``cortex-manage capacity``: instances of a shape or flavor that fit in a zone.

The same question as ``GET /v1/capacity`` (:func:`cortex.services.capacity.placeable`),
asked of the API's services on the configured database: a summary and a table of the
hosts that take them, or the whole document with ``-f json|yaml``. ``cortex-manage
forecast`` sets the flavor families' forecasts against the same counts
(:func:`flavor_supply`, :func:`print_placeable`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import partial
from typing import Any

from cortex import conf as config
from cortex.cli import CommandError, add_format, emit

HOST_COLUMNS = ("host", "now", "empty")
#: ``cortex-manage forecast``'s table of the flavors against their placeable supply.
PLACEABLE_COLUMNS = ("flavor_family", "availability_zone", "flavor", "gpus", "placeable_now",
                     "instances_per_day", "days_to_exhaustion")


def flavor_supply(conf: config.Config,
                  with_services: Callable[[config.Config, Callable[[Any], Any]], Any]) -> Any:
    """The placeable supply of every synced GPU flavor in every zone, counted now.

    :class:`cortex.forecast.plan.FlavorSupply` of one computation of the
    ``cortex_flavor_placeable_instances`` gauges
    (:meth:`cortex.services.capacity.FlavorCapacity.refresh`) on the API's services.
    """
    from cortex.services.capacity import FlavorCapacity, gpu_flavors

    def work(services):
        counted = FlavorCapacity(services.scheduler, lambda: gpu_flavors(services.engine),
                                 services.devices)
        counted.refresh()
        return counted.supply()

    return with_services(conf, work)


def print_placeable(documents: list[dict[str, Any]], fmt: str) -> None:
    """The table of :data:`PLACEABLE_COLUMNS`: each flavor family's flavors, by zone.

    ``documents``: forecast documents set against the placeable supply
    (:func:`cortex.services.forecasts.with_placeable`); the flavors asked for that are
    no synced GPU flavor are named on a line after it. Printed for ``-f table`` alone
    (the documents carry it for ``json`` and ``yaml``), and only when a family has
    flavors.
    """
    every = [{"flavor_family": d["flavor_family"], "availability_zone": d["availability_zone"]
              or "any"} | flavor for d in documents if d.get("placeable")
             for flavor in d["placeable"]]
    rows = [r for r in every if r["placeable_now"] is not None]
    if fmt != "table" or not every:
        return
    print("\nflavors against the instances that fit now (placeable_now):")
    emit(rows, PLACEABLE_COLUMNS, fmt)
    uncounted = sorted({r["flavor"] for r in every if r["placeable_now"] is None})
    if uncounted:
        print(f"not synced GPU flavors, not counted: {', '.join(uncounted)}")


def capacity(conf: config.Config, args: argparse.Namespace,
             with_services: Callable[[config.Config, Callable[[Any], Any]], Any]) -> int:
    """Print the placeable instances of ``--flavor`` or ``--vcpus``/``--memory-mb``.

    ``with_services(conf, work)``: runs ``work`` on the API's services
    (:func:`cortex.cmd.manage.with_services`). Exit status 2 for a shape outside its
    bounds or a zone without hosts, 1 for an unknown flavor or a shape no pipeline takes.
    """
    from cortex.scheduler.service import SchedulingFailed
    from cortex.services.capacity import FlavorUnknown, Shape, ShapeInvalid, flavor, placeable

    def work(services):
        try:
            if args.flavor:
                if args.vcpus is not None or args.memory_mb is not None or args.gpus \
                        or args.product:
                    raise ShapeInvalid("--flavor names the shape: leave out --vcpus, "
                                       "--memory-mb, --gpus and --product")
                shape = flavor(services.engine, args.flavor, args.project)
            elif args.vcpus is None or args.memory_mb is None:
                raise ShapeInvalid("--vcpus and --memory-mb are required (or --flavor)")
            else:
                shape = Shape(args.vcpus, args.memory_mb, args.gpus,
                              tuple(p.lower() for p in args.product or ()), args.numa_nodes,
                              args.mem_page_size, args.project)
            return placeable(services.scheduler, shape, args.availability_zone,
                             limit=args.limit, devices=services.devices)
        except ShapeInvalid as exc:
            raise CommandError(str(exc), 2) from None
        except (FlavorUnknown, SchedulingFailed) as exc:
            raise CommandError(str(exc), 1) from None

    document = with_services(conf, work)
    if args.format == "table":
        print(f"placeable now: {document['placeable_now']}  empty: "
              f"{document['placeable_empty']}  zone: {document['availability_zone'] or 'any'}"
              f"  pipeline: {document['pipeline']}")
        print(f"limited by: {document['limited_by'] or 'the limit'}")
        if not document["complete"]:
            print(f"(counted up to --limit {args.limit})")
        print()
    emit(document["hosts"], HOST_COLUMNS, args.format, document)
    return 0


def add_parser(sub: argparse._SubParsersAction,
               with_services: Callable[[config.Config, Callable[[Any], Any]], Any]) -> None:
    """Add ``capacity`` to ``cortex-manage``'s sub-parsers (see :func:`capacity`)."""
    ask = sub.add_parser("capacity", help="instances of a shape or flavor that fit, now and "
                                          "on the empty fleet")
    ask.add_argument("--flavor", help="a synced Nova flavor (instead of the shape's values)")
    ask.add_argument("--vcpus", type=int, help="vCPUs per instance")
    ask.add_argument("--memory-mb", type=int, help="MiB per instance")
    ask.add_argument("--gpus", type=int, default=0, help="GPUs passed through per instance")
    ask.add_argument("--product", action="append",
                     help="PCI product id a GPU may be (repeatable; none: any)")
    ask.add_argument("--numa-nodes", type=int, help="guest NUMA cells (default: 2 from 8 "
                                                    "GPUs, 1 with fewer, none without)")
    ask.add_argument("--mem-page-size", help="hw:mem_page_size: small, large, any, 2MB, 1GB")
    ask.add_argument("--project", help="ask as this project (tenancy, its committed room)")
    ask.add_argument("--availability-zone", help="the zone (default: every host)")
    ask.add_argument("--limit", type=int, default=1000,
                     help="instances counted at most per fleet (default 1000)")
    add_format(ask)
    ask.set_defaults(func=partial(capacity, with_services=with_services))
