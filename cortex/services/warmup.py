"""A worker warmed before it serves: the view loaded, every lazy table of it built.

Unwarmed, a fresh gunicorn worker would load its knowledge view inside its first call
and build, in its first calls, what the plugins derive from the view (capacity tables,
aggregate facts, each GPU model's pair matrix and its free-set memos, the cells'
free-CPU facts), compile its schema validators and open its database connections: at
1,000 hosts its first GPU call would take hundreds of milliseconds, and more than the
2 s request budget on a busy machine (a 503). gunicorn's ``post_worker_init`` hook
(``etc/cortex/gunicorn.conf.py``) calls :func:`warm_up` before the worker accepts a
connection.

The warm-up asks the scheduler, as simulations that promise and record nothing, for a
general-purpose VM and for 1, 2, 4 and 8 GPUs (dedicated CPUs, ``legacy`` PCI NUMA
policy) on every host the view knows, each through the pipeline the choice rules give
it; then for the newest ``[api] warm_up_shapes`` request shapes live calls brought
(:mod:`cortex.store.shapes`), the bodies Nova really sent, on every host. Kept step
answers (:mod:`cortex.pipeline.memo`) serve only real requests of the same shape, so a
flavor the cloud asks for finds its answers kept; what the calls build on the view and
its topologies serves all. For each pipeline it asked it also makes the metric series a
live call counts into and opens a connection of the reservation store's pool, where
it rehearses one promise and rolls it back
(:meth:`cortex.scheduler.service.SchedulerService.prepare`,
``open_reservation_store``): without them a fresh
worker's first call at 100 GPU hosts took 2.2-2.3x a warm one, now 1.5-1.7x.

The warm-up has a time budget, ``[api] warm_up_timeout`` seconds from the worker's
start (gunicorn's fork, ``post_fork``), so what the start itself costs (building the
app, loading the view) counts against it: a worker replacing one that died while the
machine is busy serves within seconds, with what it had time to warm, instead of
warming it all first. The requests not asked are skipped; their first live calls build
what they need. The code a worker runs is imported by gunicorn's master before it forks
(:func:`cortex.wsgi.preload`).
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from cortex.knowledge.cache import KnowledgeUnavailable, settle_garbage_collector
from cortex.scheduler.service import SchedulingFailed, simulation
from cortex.simulator.replay import request_body
from cortex.simulator.trace import TraceRequest

LOG = logging.getLogger(__name__)
#: (GPUs, vCPUs, MiB, guest NUMA cells) of the warm-up requests; 0 GPUs: a plain VM.
SHAPES = ((0, 2, 4096, 0), (1, 8, 65536, 1), (2, 16, 131072, 1), (4, 32, 262144, 1),
          (8, 64, 524288, 2))
#: The serving worker's collector thresholds (CPython's default: 700, 10, 10).
SERVING_THRESHOLDS = (20_000, 10, 10)


def serving_collector() -> None:
    """Set this process's garbage collector for serving: young collections 30x rarer.

    A call allocates tens of thousands of short-lived containers (candidates, answers,
    the decision record), freed by reference counting, yet each 700 of them start a
    young collection, and every tenth of those an older one: at 10,000 GPU hosts a
    full collection ran every other call and took 65-85 ms of it (what was built on the
    view after it was frozen: the steps' tables and kept answers). At 20,000 the
    collector runs 30x less often; cycles wait longer to be freed, and are freed at the
    latest when the next knowledge view loads (:func:`settle_garbage_collector`).
    """
    gc.set_threshold(*SERVING_THRESHOLDS)


def warm_up(app: Any, started: float | None = None,
            clock: Callable[[], float] = time.monotonic) -> float:
    """Load ``app``'s knowledge view and run the warm-up requests; seconds it took.

    ``started``: when the worker started, a ``clock()`` value (default: now). The
    warm-up ends ``[api] warm_up_timeout`` seconds after it: no request is asked after
    that, the one under way stops before its next pipeline step, and the rest are
    skipped (a warning counts them); the view is loaded all the same. ``clock``:
    seconds, monotonic. A view that cannot be loaded (the database is down) is logged
    and left to the first call, as without a warm-up; nothing raises.
    """
    begun = clock()
    services = app.extensions["cortex"]
    start = begun if started is None else started
    budget = services.conf.get("api", "warm_up_timeout")
    deadline = start + budget
    try:
        view = services.knowledge.view()
    except KnowledgeUnavailable as exc:
        LOG.warning("warm-up: knowledge unavailable (%s); the first call loads it", exc)
        return clock() - begun
    if services.scheduler.reservations is not None:
        try:
            services.scheduler.reservations.active(view.loaded_at)
        except Exception as exc:  # noqa: BLE001 - the first call retries it
            LOG.warning("warm-up: in-flight reservations unreadable: %r", exc)
        services.scheduler.open_reservation_store()
    hosts, asks = _asks(services, view)
    asked = replayed = 0
    for service, body, recorded in asks:
        left = deadline - clock()
        if left <= 0:
            break
        _ask(services, body, service, remember=recorded, deadline=time.perf_counter() + left)
        asked += 1
        replayed += recorded
    if asked:
        settle_garbage_collector(len(view.hosts))  # what the calls built lives as the view
    if asked < len(asks):
        LOG.warning("warm-up: %d of %d requests skipped, %.1f s after the worker's start "
                    "([api] warm_up_timeout %g s)", len(asks) - asked, len(asks),
                    clock() - start, budget)
    elapsed = clock() - begun
    LOG.info("warm-up: %d hosts, %d request shapes of live calls, %.2f s", len(hosts),
             replayed, elapsed)
    return elapsed



def _asks(services: Any, view: Any) -> tuple[list[dict[str, Any]], list[tuple]]:
    """The hosts of ``view`` as candidates, and the warm-up's requests on all of them.

    Each request is ``(service, body, recorded)``: the :data:`SHAPES` first, then the
    shapes live calls brought (``recorded`` True).
    """
    hosts = [{"host": name, "hypervisor_hostname": next(iter(state.nodes), name)}
             for name, state in view.hosts.items()]
    weights = {entry["host"]: 0.0 for entry in hosts}
    asks = [("nova", request_body(TraceRequest(f"warm-up-{gpus}", 0.0, None, gpus, 0, vcpus,
                                               memory_mb, numa_nodes=cells,
                                               cpu_policy="dedicated" if gpus else "shared"),
                                  hosts, weights, pipeline=""), False)
            for gpus, vcpus, memory_mb, cells in SHAPES]
    asks += [(service, {**body, "hosts": hosts, "weights": weights}, True)
             for service, body in _recorded_shapes(services)]
    return hosts, asks

def _recorded_shapes(services: Any) -> list[tuple[str, dict[str, Any]]]:
    """The newest ``[api] warm_up_shapes`` stored shapes of the services this app serves.

    ``[(service, body without hosts and weights)]``; none when off or unreadable.
    """
    limit = services.conf.get("api", "warm_up_shapes")
    if not limit or services.shapes.store is None:
        return []
    try:
        shapes = services.shapes.store.newest(limit)
    except Exception as exc:  # noqa: BLE001 - the built-in shapes warm it all the same
        LOG.warning("warm-up: request shapes unreadable: %r", exc)
        return []
    return [(service, body) for service, body in shapes if service in services.parsers]


def _ask(services: Any, body: dict[str, Any], service: str = "nova",
         remember: bool = False, deadline: float | None = None) -> None:
    """Validate and decide one warm-up body as a simulation; failures are logged.

    ``remember``: the body is a stored shape, so its shape is marked met in the worker's
    log (its first live call then stores nothing again). ``deadline``: a
    ``time.perf_counter()`` value after which no pipeline step of it starts.
    """
    body.pop("pipeline", None)  # the choice rules decide, as for Nova's own calls
    try:
        errors = services.validator.errors(service, body)
        if errors:
            LOG.warning("warm-up body refused: %s", "; ".join(errors)[:300])
            return
        request = services.parsers[service](body)
        decision = services.scheduler.schedule(request, replace(simulation(),
                                                                deadline=deadline))
        services.scheduler.prepare(decision)
        if remember:
            services.shapes.remember(request, decision.pipeline)
    except SchedulingFailed as exc:
        if deadline is not None and time.perf_counter() > deadline:
            LOG.info("warm-up request stopped at the warm-up's end: %s", exc.detail)
        else:
            LOG.warning("warm-up request refused: %s", exc.detail)
    except Exception:  # noqa: BLE001 - a warm-up must never keep a worker from serving
        LOG.exception("warm-up request failed")
