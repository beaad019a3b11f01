"""A worker warmed before it serves: the view loaded, every lazy table of it built.

A fresh gunicorn worker used to load its knowledge view inside its first call and to
build, in its first calls, what the plugins derive from the view (capacity tables,
aggregate facts, each GPU model's pair matrix and its free-set memos, the cells'
free-CPU facts), compile its schema validators and open its database connections: the
first GPU call at 1,000 hosts took about 600 ms, and more than the 2 s request budget on
a busy machine (a 503). gunicorn's ``post_worker_init`` hook
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
"""

from __future__ import annotations

import gc
import logging
import time
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


def warm_up(app: Any, budget_s: float = 20.0) -> float:
    """Load ``app``'s knowledge view and run the warm-up requests; seconds it took.

    Stops after ``budget_s`` seconds (gunicorn kills a worker that does not start
    within its ``timeout``). A view that cannot be loaded (the database is down) is
    logged and left to the first call, as without a warm-up; nothing raises.
    """
    started = time.perf_counter()
    services = app.extensions["cortex"]
    try:
        view = services.knowledge.view()
    except KnowledgeUnavailable as exc:
        LOG.warning("warm-up: knowledge unavailable (%s); the first call loads it", exc)
        return time.perf_counter() - started
    if services.scheduler.reservations is not None:
        try:
            services.scheduler.reservations.active(view.loaded_at)
        except Exception as exc:  # noqa: BLE001 - the first call retries it
            LOG.warning("warm-up: in-flight reservations unreadable: %r", exc)
        services.scheduler.open_reservation_store()
    hosts = [{"host": name, "hypervisor_hostname": next(iter(state.nodes), name)}
             for name, state in view.hosts.items()]
    weights = {entry["host"]: 0.0 for entry in hosts}
    for gpus, vcpus, memory_mb, cells in SHAPES:
        if time.perf_counter() - started > budget_s:
            LOG.warning("warm-up stopped after %.1f s (budget)", budget_s)
            break
        _ask(services, request_body(TraceRequest(f"warm-up-{gpus}", 0.0, None, gpus, 0, vcpus,
                                                 memory_mb, numa_nodes=cells,
                                                 cpu_policy="dedicated" if gpus else "shared"),
                                    hosts, weights, pipeline=""))
    replayed = _replay_shapes(services, hosts, weights, started, budget_s)
    settle_garbage_collector()  # what the calls built on the view lives as long as it
    elapsed = time.perf_counter() - started
    LOG.info("warm-up: %d hosts, %d request shapes of live calls, %.2f s", len(hosts),
             replayed, elapsed)
    return elapsed


def _replay_shapes(services: Any, hosts: list[dict[str, str]], weights: dict[str, float],
                   started: float, budget_s: float) -> int:
    """Replay the newest stored request shapes on every host; how many were asked."""
    limit = services.conf.get("api", "warm_up_shapes")
    if not limit or services.shapes.store is None:
        return 0
    try:
        shapes = services.shapes.store.newest(limit)
    except Exception as exc:  # noqa: BLE001 - the built-in shapes are warm already
        LOG.warning("warm-up: request shapes unreadable: %r", exc)
        return 0
    asked = 0
    for service, body in shapes:
        if time.perf_counter() - started > budget_s:
            LOG.warning("warm-up stopped after %.1f s (budget)", budget_s)
            break
        if service not in services.parsers:
            continue
        _ask(services, {**body, "hosts": hosts, "weights": weights}, service, remember=True)
        asked += 1
    return asked


def _ask(services: Any, body: dict[str, Any], service: str = "nova",
         remember: bool = False) -> None:
    """Validate and decide one warm-up body as a simulation; failures are logged.

    ``remember``: the body is a stored shape, so its shape is marked met in the worker's
    log (its first live call then stores nothing again).
    """
    body.pop("pipeline", None)  # the choice rules decide, as for Nova's own calls
    try:
        errors = services.validator.errors(service, body)
        if errors:
            LOG.warning("warm-up body refused: %s", "; ".join(errors)[:300])
            return
        request = services.parsers[service](body)
        decision = services.scheduler.schedule(request, simulation())
        services.scheduler.prepare(decision)
        if remember:
            services.shapes.remember(request, decision.pipeline)
    except SchedulingFailed as exc:
        LOG.warning("warm-up request refused: %s", exc.detail)
    except Exception:  # noqa: BLE001 - a warm-up must never keep a worker from serving
        LOG.exception("warm-up request failed")
