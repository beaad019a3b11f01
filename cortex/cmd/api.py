"""cortex-api: the development server (production runs gunicorn on cortex.wsgi)."""

from __future__ import annotations

import argparse
import importlib.util
import logging
import socket
import sys
import threading

from cortex import conf as config
from cortex.api.app import create_app
from cortex.cli import CommandError, parser, run
from cortex.db import migrate
from cortex.db.engine import make_engine
from cortex.log import setup_logging
from cortex.store.fleet import FleetError, import_fleet, read_fleet

LOG = logging.getLogger("cortex.api")


def check_port(host: str, port: int) -> None:
    """Raise CommandError (exit 1) unless a server could listen on ``host``:``port`` now.

    Binds a socket the way the server will (SO_REUSEADDR, so a port in TIME_WAIT is
    free) and closes it: a port another process listens on, or an address that is not
    this machine's, fails here, before the database is touched.
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        raise CommandError(f"cannot listen on {host}:{port}: "
                           f"{exc.strerror or exc}") from None


def demo_foresight(engine) -> None:
    """Generated GPU demand and its forecasts for the demo, with the ``forecast`` extra.

    Without numpy and statsmodels (the ``forecast`` extra) the demo logs how to get them
    and serves without (:func:`cortex.forecast.run.seed_demo`). :func:`serve` runs it in
    a thread of its own while it serves; a failure is logged.
    """
    if importlib.util.find_spec("numpy") is None:
        LOG.info("demo: no generated GPU demand nor forecasts; "
                 "pip install 'cortex-scheduler[forecast]' for them")
        return
    from cortex.forecast.run import seed_demo

    try:
        written, forecasts = seed_demo(engine)
    except Exception:  # noqa: BLE001 - the demo serves without its forecasts then
        LOG.exception("demo: generated GPU demand or its forecasts failed")
        return
    LOG.info("demo GPU demand: %d generated creates written; %s", written,
             f"{forecasts} forecasts stored" if forecasts is not None else
             "no forecasts (pip install 'cortex-scheduler[forecast]' for statsmodels)")


def serve(conf: config.Config, args) -> int:
    """Check the port, upgrade the embedded database, load the demo fleet, serve until killed.

    The demo also gets 90 days of generated GPU demand, and its forecasts where
    statsmodels is installed (:func:`cortex.forecast.run.seed_demo`), written by a
    thread while the server answers: the forecasts (seconds of CPU) appear in
    ``GET /v1/forecasts`` and the dashboard once fitted.
    """
    if args.demo:
        conf = conf.with_overrides({"api.auth_strategy": "noauth"})
    setup_logging(conf)
    host, port = args.host or conf.get("api", "host"), args.port or conf.get("api", "port")
    check_port(host, port)
    engine = make_engine(conf.database_url)
    if args.demo or not conf.get("database", "connection"):
        migrate.upgrade(engine)  # the embedded default is ours to manage
    if args.demo:
        fleet = read_fleet(config.shipped_file("demo-fleet.yaml"))
        with engine.begin() as connection:
            counts = import_fleet(connection, fleet)
        LOG.info("demo fleet loaded: %s", counts)
        threading.Thread(target=demo_foresight, args=(engine,), daemon=True,
                         name="cortex-demo-foresight").start()
    app = create_app(conf, engine=engine)
    LOG.info("cortex-api on http://%s:%d (database %s)", host, port,
             engine.url.render_as_string(hide_password=True))
    app.run(host=host, port=port, threaded=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Serve the API; ``--demo`` first upgrades the database and loads the demo fleet.

    Errors are one line on stderr: 2 for configuration and fleet errors, 1 for a port
    that is taken, a database that fails, or anything else (cortex.cli.run).
    """
    args = build_parser().parse_args(argv)
    return run("cortex-api", args, lambda conf: serve(conf, args), expected=(FleetError,))


def build_parser() -> argparse.ArgumentParser:
    """The command line of cortex-api."""
    args_parser = parser(
        "cortex-api", __doc__,
        needs="the base package (pip install cortex-scheduler). Optional extras: keystone "
              "for [api] auth_strategy = keystone, forecast for the demo's GPU forecasts, "
              "fast for faster decision records.")
    args_parser.add_argument("--config-file", help="cortex.conf (default: $CORTEX_CONFIG_FILE)")
    args_parser.add_argument("--demo", action="store_true",
                             help="load the bundled demo fleet (etc/cortex/demo-fleet.yaml) "
                                  "first and serve without authentication")
    args_parser.add_argument("--host", help="bind address (default: [api] host)")
    args_parser.add_argument("--port", type=int, help="bind port (default: [api] port)")
    return args_parser


if __name__ == "__main__":
    sys.exit(main())
