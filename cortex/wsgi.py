"""WSGI entry point: ``gunicorn 'cortex.wsgi:application'``.

The app is built on first access of ``application`` (PEP 562), not at import, from
``$CORTEX_CONFIG_FILE`` and the environment.
"""

from __future__ import annotations

from functools import cache


@cache
def _build():
    """Load the configuration, set up logging and build the app once per process."""
    from cortex import conf
    from cortex.api.app import create_app
    from cortex.log import setup_logging

    config = conf.load()
    setup_logging(config)
    return create_app(config)


def preload() -> None:
    """Import the code every worker runs, and parse what each would parse alike, once.

    gunicorn's master calls it (``on_starting``) before it forks its workers, so a
    worker starts with Cortex, its libraries and its in-tree plugins imported, the
    OpenAPI document parsed and the models' mappers configured: at 1,000 GPU hosts a
    worker's start to its view loaded takes 0.3-0.37 s of CPU, not 1.5-1.6 s: what
    a worker started on a busy machine (replacing one that died) waits for its share of
    the cores to do. Reads no configuration, builds no app, opens no connection, starts
    no thread. The master keeps the code it imported: new code takes a restart of
    gunicorn (or its USR2 upgrade), as a HUP forks the new workers from it.
    """
    from sqlalchemy.orm import configure_mappers

    from cortex import conf, log  # noqa: F401 - what _build imports
    from cortex.api import app  # noqa: F401 - the app's modules
    from cortex.api.schema import load_openapi
    from cortex.plugins.registry import load_in_tree
    from cortex.services import warmup  # noqa: F401 - the warm-up's

    load_openapi()  # cached per process: the workers inherit the document
    load_in_tree()
    configure_mappers()  # the models' mappers, configured on their first query otherwise


def warm_up(started: float | None = None) -> None:
    """Ready this worker to serve: the collector set for a server, the app warmed.

    ``started``: the worker's start, a :func:`time.monotonic` value (default: now);
    the warm-up ends ``[api] warm_up_timeout`` seconds after it. The app is warmed
    unless ``[api] warm_up`` is false. gunicorn's ``post_worker_init`` hook calls it
    (:mod:`cortex.services.warmup`, :func:`cortex.services.warmup.serving_collector`).
    """
    from cortex.services.warmup import serving_collector
    from cortex.services.warmup import warm_up as warm

    serving_collector()
    app = _build()
    if app.extensions["cortex"].conf.get("api", "warm_up"):
        warm(app, started)


def shutdown() -> None:
    """Flush this process's decision log and request shapes (gunicorn's ``worker_exit``)."""
    if _build.cache_info().currsize:
        _build().extensions["cortex"].decisions.close()
        _build().extensions["cortex"].shapes.close()


def __getattr__(name: str):
    """Module attribute ``application``, built lazily."""
    if name == "application":
        return _build()
    raise AttributeError(name)
