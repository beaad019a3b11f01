"""Placeable instances of a shape or a flavor, as the API, the CLI and the metrics ask.

:func:`placeable` answers one question (``GET /v1/capacity``, ``cortex-manage
capacity``): how many instances of a shape fit in a zone now and on the empty fleet
(:func:`cortex.simulator.capacity.count`), the step that stops the next one, and the
hosts that would take them. :class:`FlavorCapacity` keeps
``cortex_flavor_placeable_instances{flavor,availability_zone,state}`` for every synced
Nova flavor that asks for GPUs, computed in a thread of its own once per knowledge
version (at most every :data:`MIN_INTERVAL` seconds), never while a scrape or a
request waits; its last counts are also the placeable supply the flavor families'
forecasts are set against (:meth:`FlavorCapacity.supply`,
:func:`cortex.forecast.plan.against_placeable`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from sqlalchemy import select

from cortex.db import guard, models
from cortex.forecast.plan import FlavorSupply
from cortex.knowledge.view import KnowledgeView
from cortex.scheduler.service import NO_BUDGET_WAIT, SchedulerService
from cortex.simulator.capacity import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    Shape,
    ShapeInvalid,
    count,
    empty_view,
    flavor_gpus,
    flavor_shape,
)

__all__ = ["FLAVOR_CAPACITY", "MAX_LIMIT", "FlavorCapacity", "FlavorUnknown", "Shape",
           "ShapeInvalid", "flavor", "flavor_supply", "gpu_flavors", "placeable"]

LOG = logging.getLogger(__name__)


class FlavorUnknown(LookupError):
    """No synced flavor has that name (an API 404, exit status 1)."""


def _in_flight(scheduler: SchedulerService, now: datetime) -> list[Any]:
    """The in-flight reservations, read once; none when there is no store or it fails."""
    store = scheduler.reservations
    if store is None or scheduler.settings.reservation_ttl <= 0:
        return []
    try:
        with guard.deadline(scheduler.settings.request_time_budget or NO_BUDGET_WAIT):
            return list(store.active(now))
    except Exception as exc:  # noqa: BLE001 - as the scheduler: counted without them
        LOG.warning("in-flight reservations unreadable, not counted: %r", exc)
        return []


def placeable(scheduler: SchedulerService, shape: Shape, zone: str | None,
              now: datetime | None = None, limit: int = DEFAULT_LIMIT,
              devices: Any = None, view: KnowledgeView | None = None) -> dict[str, Any]:
    """The capacity document of ``shape`` in ``zone`` (None: every host).

    ``{"availability_zone", "pipeline", "placeable_now", "placeable_empty",
    "limited_by", "limited_by_empty", "complete", "hosts": [{"host", "now", "empty"}]}``:
    ``limited_by`` the step that stops the next instance now, ``"<step>: <reason>"``
    (``commitments``/``reservations`` where their room is what stops it: see
    :mod:`cortex.scheduler.refusals`; None when ``limit`` stopped the count, then
    ``complete`` is False); ``hosts`` those that take at least one, by name. ``view``:
    the knowledge to ask (default: the scheduler's). Raises ShapeInvalid (a zone without
    hosts, a limit outside 1..:data:`MAX_LIMIT`), SchedulingFailed (400: no pipeline
    fits; 503) and KnowledgeUnavailable.
    """
    if not 1 <= limit <= MAX_LIMIT:
        raise ShapeInvalid(f"limit must be an integer from 1 to {MAX_LIMIT}")
    now = now or datetime.now(UTC)
    view = view if view is not None else scheduler.knowledge.view()
    if zone is not None and not any(s.availability_zone == zone for s in view.hosts.values()):
        raise ShapeInvalid(f"no host known in availability zone {zone!r}")
    current = count(scheduler, view, shape, zone, now, _in_flight(scheduler, now), limit,
                    devices)
    empty = count(scheduler, empty_view(view), shape, zone, now, (), limit, devices)
    names = sorted(set(current.hosts) | set(empty.hosts))
    return {
        "availability_zone": zone, "pipeline": current.pipeline or empty.pipeline,
        "placeable_now": current.count, "placeable_empty": empty.count,
        "limited_by": str(current.limited_by) if current.limited_by else None,
        "limited_by_empty": str(empty.limited_by) if empty.limited_by else None,
        "complete": current.complete and empty.complete,
        "hosts": [{"host": name, "now": current.hosts.get(name, 0),
                   "empty": empty.hosts.get(name, 0)} for name in names]}


def _flavor_rows(bind: Any) -> dict[str, dict[str, Any]]:
    """``{name: flavor}`` of the synced flavors, and the flavors servers carry inline.

    The flavors table (Nova's ``/flavors/detail``) first; a name only servers carry
    (a fleet file's instances, a flavor since deleted) is taken from a server's
    embedded flavor (``original_name``, ``vcpus``, ``ram``, ``extra_specs``).
    """
    found: dict[str, dict[str, Any]] = {}
    with bind.connect() as connection:
        for row in connection.execute(select(models.Flavor).where(
                models.Flavor.is_disabled.is_(False)).order_by(models.Flavor.name)).scalars():
            found.setdefault(row.name, {"name": row.name, "vcpus": row.vcpus, "ram": row.ram,
                                        "extra_specs": dict(row.extra_specs or {})})
        for embedded, in connection.execute(select(models.Server.flavor)):
            embedded = embedded or {}
            name = embedded.get("original_name")
            if name and name not in found and "vcpus" in embedded and "ram" in embedded:
                found[name] = {"name": name, "vcpus": embedded["vcpus"], "ram": embedded["ram"],
                               "extra_specs": dict(embedded.get("extra_specs") or {})}
    return found


def flavor(bind: Any, name: str, project_id: str | None = None) -> Shape:
    """The Shape of the synced flavor ``name`` (:func:`_flavor_rows`); FlavorUnknown if none."""
    row = _flavor_rows(bind).get(name)
    if row is None:
        raise FlavorUnknown(f"no synced flavor {name!r}")
    return flavor_shape(row, project_id)


def asks_for_gpus(specs: Mapping[str, Any]) -> bool:
    """Whether a flavor's extra specs ask for GPUs: a PCI alias, a device profile or vGPUs."""
    return bool(flavor_gpus({str(k): str(v) for k, v in specs.items()})
                or specs.get("accel:device_profile")
                or any(str(k).startswith("resources") and str(k).endswith(":VGPU")
                       for k in specs))


def gpu_flavors(bind: Any) -> list[Shape]:
    """The Shapes of the synced flavors that ask for GPUs, by name; unparsable ones left out."""
    shapes = []
    for row in _flavor_rows(bind).values():
        if asks_for_gpus(row["extra_specs"]):
            try:
                shapes.append(flavor_shape(row))
            except (ShapeInvalid, ValueError, TypeError) as exc:
                LOG.warning("flavor %r left out of the capacity gauges: %s", row["name"], exc)
    return sorted(shapes, key=lambda s: s.flavor or "")


#: Seconds between two computations of the flavor gauges at least, whatever the versions.
MIN_INTERVAL = 300.0
#: The key of an app's :class:`FlavorCapacity` in its ``extensions``.
FLAVOR_CAPACITY = "cortex.flavor_capacity"


def flavor_supply(extensions: Mapping[str, Any]) -> FlavorSupply | None:
    """The placeable supply of the GPU flavors (:meth:`FlavorCapacity.supply`) of an app.

    ``extensions``: the app's ``extensions``. None when the counts are not computed yet
    (the call wakes their thread) or the app keeps none.
    """
    flavors = extensions.get(FLAVOR_CAPACITY)
    return flavors.supply() if flavors is not None else None


class FlavorCapacity:
    """``cortex_flavor_placeable_instances`` per GPU flavor and zone, kept per knowledge version.

    ``scheduler``: its knowledge gives the view, its pipelines place; ``flavors()``:
    the GPU flavors' shapes (:func:`gpu_flavors`); ``devices``: the ``[gpu]`` catalog;
    ``min_interval``: seconds between two computations at least (a 10,000-host fleet's
    takes seconds of a worker's CPU, and the knowledge version moves at every sync).
    :meth:`collect` (a scrape) never computes: it answers the last numbers and, when
    the knowledge has moved and ``min_interval`` has passed, wakes the thread that
    computes the next (:meth:`refresh`, which the thread runs; tests call it directly).
    """

    def __init__(self, scheduler: SchedulerService, flavors: Callable[[], list[Shape]],
                 devices: Any = None, limit: int = DEFAULT_LIMIT,
                 min_interval: float = MIN_INTERVAL) -> None:
        self._scheduler = scheduler
        self._flavors = flavors
        self._devices = devices
        self._limit = limit
        self._min_interval = min_interval
        self._computed_at: float | None = None
        self._computed: tuple[int | None, list[tuple[str, str, str, int]]] = (None, [])
        self._gpus: dict[str, int] = {}
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def refresh(self) -> bool:
        """Compute the gauges of the current view when not done for its version yet.

        True when it computed. A flavor that cannot be placed (no pipeline fits) is
        logged and left out; the knowledge being unavailable leaves the last numbers.
        """
        view = self._scheduler.knowledge.view()
        if self._computed[0] == view.version:
            return False
        now = datetime.now(UTC)
        zones = sorted({s.availability_zone for s in view.hosts.values()
                        if s.availability_zone is not None})
        samples = []
        shapes = self._flavors()
        for shape in shapes:
            for zone in zones:
                try:
                    found = placeable(self._scheduler, shape, zone, now, self._limit,
                                      self._devices, view)
                except Exception as exc:  # noqa: BLE001 - one flavor must not stop the rest
                    LOG.warning("capacity of flavor %s in %s not computed: %r",
                                shape.flavor, zone, exc)
                    continue
                samples.append((shape.flavor or "", zone, "now", found["placeable_now"]))
                samples.append((shape.flavor or "", zone, "empty", found["placeable_empty"]))
        self._gpus = {s.flavor: s.gpus for s in shapes if s.flavor and s.gpus}
        self._computed = (view.version, samples)
        self._computed_at = time.monotonic()
        return True

    def supply(self) -> FlavorSupply | None:
        """The last counts as the flavors' placeable supply; None before the first.

        ``FlavorSupply.placeable`` holds the ``now`` counts by (flavor, zone),
        ``FlavorSupply.gpus`` the whole GPUs of each flavor that passes any through.
        Never computes: it wakes the thread as a scrape does (:meth:`collect`).
        """
        self._wake_if_due()
        if self._computed[0] is None:
            return None
        return FlavorSupply(dict(self._gpus), {(name, zone): value for name, zone, state, value
                                               in self._computed[1] if state == "now"})

    def _wake_if_due(self) -> None:
        """Wake the computing thread when the knowledge version moved and it is due."""
        current = getattr(self._scheduler.knowledge, "current", None)
        due = self._computed_at is None or (
            time.monotonic() - self._computed_at >= self._min_interval)
        if due and (current is None or current.version != self._computed[0]):
            self.start()
            self._wake.set()

    def start(self) -> None:
        """Start the computing thread (a daemon), once."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, daemon=True,
                                                name="cortex-flavor-capacity")
                self._thread.start()

    def _loop(self) -> None:
        """Wait to be woken, then compute; errors are logged and the next wake retries."""
        while True:
            self._wake.wait()
            self._wake.clear()
            try:
                self.refresh()
            except Exception as exc:  # noqa: BLE001 - logged; the next scrape retries
                LOG.warning("flavor capacity gauges not computed: %r", exc)

    def describe(self) -> list[Metric]:
        """Nothing up front: the series depend on the flavors."""
        return []

    def collect(self) -> Iterator[Metric]:
        """The last computed numbers; wakes the thread when the knowledge version moved."""
        self._wake_if_due()
        family = GaugeMetricFamily(
            "cortex_flavor_placeable_instances",
            "Instances of a GPU flavor that fit in a zone, placed one after the other "
            "through its pipeline: now (reservations, commitments and failover room "
            "counted) and on the empty fleet; computed once per knowledge version, at "
            "most every 5 minutes.",
            labels=["flavor", "availability_zone", "state"])
        for name, zone, state, value in self._computed[1]:
            family.add_metric([name, zone, state], value)
        yield family
