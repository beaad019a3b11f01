"""cortex-api: the development server (production runs gunicorn on cortex.wsgi)."""

from __future__ import annotations

import argparse
import logging
import sys

from cortex import conf as config
from cortex.api.app import create_app
from cortex.db import migrate
from cortex.db.engine import make_engine
from cortex.knowledge.fleet import FleetError, import_fleet, read_fleet
from cortex.log import setup_logging

LOG = logging.getLogger("cortex.api")


def main(argv: list[str] | None = None) -> int:
    """Serve the API; ``--demo`` first upgrades the database and loads the demo fleet."""
    parser = argparse.ArgumentParser(prog="cortex-api", description=__doc__)
    parser.add_argument("--config-file", help="cortex.conf (default: $CORTEX_CONFIG_FILE)")
    parser.add_argument("--demo", action="store_true",
                        help="load the bundled demo fleet (etc/cortex/demo-fleet.yaml) first "
                             "and serve without authentication")
    parser.add_argument("--host", help="bind address (default: [api] host)")
    parser.add_argument("--port", type=int, help="bind port (default: [api] port)")
    args = parser.parse_args(argv)
    try:
        conf = config.load(args.config_file)
        if args.demo:
            conf = conf.with_overrides({"api.auth_strategy": "noauth"})
        setup_logging(conf)
        engine = make_engine(conf.database_url)
        if args.demo or not conf.get("database", "connection"):
            migrate.upgrade(engine)  # the embedded default is ours to manage
        if args.demo:
            fleet = read_fleet(config.shipped_file("demo-fleet.yaml"))
            with engine.begin() as connection:
                counts = import_fleet(connection, fleet)
            LOG.info("demo fleet loaded: %s", counts)
        app = create_app(conf, engine=engine)
    except (config.ConfigError, FleetError, ValueError) as exc:
        print(f"cortex-api: {exc}", file=sys.stderr)
        return 2
    host, port = args.host or conf.get("api", "host"), args.port or conf.get("api", "port")
    LOG.info("cortex-api on http://%s:%d (database %s)", host, port,
             engine.url.render_as_string(hide_password=True))
    app.run(host=host, port=port, threaded=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
