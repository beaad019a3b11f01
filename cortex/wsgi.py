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


def warm_up() -> None:
    """Ready this worker to serve: the collector set for a server, the app warmed.

    The app is warmed unless ``[api] warm_up`` is false. gunicorn's ``post_worker_init``
    hook calls it (:mod:`cortex.api.warmup`, :func:`cortex.api.warmup.serving_collector`).
    """
    from cortex.api.warmup import serving_collector
    from cortex.api.warmup import warm_up as warm

    serving_collector()
    app = _build()
    if app.extensions["cortex"].conf.get("api", "warm_up"):
        warm(app)


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
