"""cortex-sync: keep the synced tables current (one leader among the replicas)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from cortex import conf as config
from cortex.cli import parser, require_extra, run
from cortex.db.engine import make_engine
from cortex.log import setup_logging

LOG = logging.getLogger("cortex.sync")


def require_sync_extra(names: tuple[str, ...]) -> None:
    """CommandError (exit 2) naming ``pip install 'cortex-scheduler[sync]'`` when missing.

    Every source needs keystoneauth1 and requests; the OpenStack ones openstacksdk too.
    """
    from cortex.sync.sources import OPENSTACK_SOURCES

    openstack = ("openstack",) if set(names) & set(OPENSTACK_SOURCES) else ()
    require_extra("sync", "keystoneauth1", "requests", *openstack)


def build_loop(conf: config.Config, names: tuple[str, ...] | None = None):
    """The SyncLoop of ``conf`` (sources, schedules, leader lock, metrics) and its metrics.

    Raises ConfigError for a bad source configuration, CommandError without the extra.
    """
    from cortex.sync.leader import LeaderLock
    from cortex.sync.loop import Schedule, SyncLoop
    from cortex.sync.sources import build_sources, enabled_sources, interval
    from cortex.sync.status import SyncMetrics

    names = names or enabled_sources(conf)
    require_sync_extra(names)
    engine = make_engine(conf.database_url)
    schedules = {name: Schedule(interval(conf, name), conf.get("sync", "jitter"),
                                conf.get("sync", "backoff_initial"),
                                conf.get("sync", "backoff_max")) for name in names}
    metrics = SyncMetrics()
    loop = SyncLoop(engine, build_sources(conf, names), schedules, LeaderLock(engine), metrics,
                    conf.get("sync", "batch_size"))
    return loop, metrics


def run_once(conf: config.Config, names: tuple[str, ...] | None = None) -> int:
    """Sync each source once (no leader lock; per-source locks still serialise writers).

    Prints one line per source; returns 0 when all succeeded, 1 otherwise. Raises
    ConfigError for a bad source configuration, CommandError without the ``sync`` extra.
    """
    from cortex.sync.runner import run_source
    from cortex.sync.sources import build_sources, enabled_sources

    names = names or enabled_sources(conf)
    require_sync_extra(names)
    engine = make_engine(conf.database_url)
    failed = 0
    for source in build_sources(conf, names):
        result = run_source(engine, source, conf.get("sync", "batch_size"))
        if result.ok:
            print(f"{result.source}: {result.rows} rows, {result.changed} changed, "
                  f"{result.duration:.2f} s")
        else:
            failed += 1
            print(f"{result.source}: FAILED after {result.duration:.2f} s: {result.error}",
                  file=sys.stderr)
    engine.dispose()
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """Run the sync loop until SIGTERM/SIGINT; errors are one line (configuration: exit 2)."""
    args = build_parser().parse_args(argv)
    return run("cortex-sync", args, serve)


def build_parser() -> argparse.ArgumentParser:
    """The command line of cortex-sync."""
    args_parser = parser(
        "cortex-sync", __doc__,
        needs="the sync extra (pip install 'cortex-scheduler[sync]'); the forecast source "
              "also the forecast extra.")
    args_parser.add_argument("--config-file", help="cortex.conf (default: $CORTEX_CONFIG_FILE)")
    return args_parser


def serve(conf: config.Config) -> int:
    """Serve the metrics and run the sync loop of ``conf`` until SIGTERM/SIGINT; 0."""
    setup_logging(conf)
    loop, metrics = build_loop(conf)
    port = conf.get("sync", "metrics_port")
    if port:
        from prometheus_client import start_http_server

        start_http_server(port, conf.get("sync", "metrics_host"), registry=metrics.registry)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: loop.stop())
    LOG.info("cortex-sync: sources %s; metrics on %s:%s",
             ", ".join(s.name for s in loop.sources), conf.get("sync", "metrics_host"), port)
    loop.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
