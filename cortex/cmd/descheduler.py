"""cortex-descheduler: relieve contended hosts and win back whole GPU islands.

Each pass asks the configured detectors (``[descheduler] detectors_file``) which
instances to move, asks the pipelines where each could go (as Nova's own move would
be scheduled), records the moves and, unless it is a dry run, asks Nova to make
them one at a time and follows each to its end. Moves an earlier pass left open (its
process killed, or out of time) are first looked at in Nova: ended ones are recorded
so, and an instance Nova still moves is not moved again. A dry run is the default
(``[descheduler] dry_run``); ``--execute`` and ``--dry-run`` override it. ``--once``
runs one pass and prints its moves; without it the process runs a pass every
``[descheduler] interval`` seconds while it leads (one leader among the replicas)
and serves its metrics on ``[descheduler] metrics_port``.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from cortex import conf as config
from cortex.cli import CommandError, add_format, emit, parser, require_extra, run
from cortex.log import setup_logging

LOG = logging.getLogger("cortex.descheduler")
COLUMNS = ("instance_uuid", "source", "target", "kind", "state", "detector", "reason",
           "detail")


def build_parser() -> argparse.ArgumentParser:
    """The command line (see the module doc)."""
    args_parser = parser(
        "cortex-descheduler", __doc__.split("\n\n")[0],
        needs="the base package (pip install cortex-scheduler); making moves (--execute, "
              "or [descheduler] dry_run = false) needs the sync extra "
              "(pip install 'cortex-scheduler[sync]').")
    args_parser.add_argument("--config-file", help="cortex.conf (default: $CORTEX_CONFIG_FILE)")
    args_parser.add_argument("--once", action="store_true",
                             help="run one pass, print its moves and exit")
    mode = args_parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", dest="dry_run", action="store_true", default=None,
                      help="plan and record the moves, make none")
    mode.add_argument("--execute", dest="dry_run", action="store_false",
                      help="make the planned moves through Nova")
    add_format(args_parser)
    return args_parser


def main(argv: list[str] | None = None) -> int:
    """Run one pass (``--once``) or the loop; errors are one line (configuration: exit 2)."""
    args = build_parser().parse_args(argv)
    return run("cortex-descheduler", args, lambda conf: serve(conf, args))


def serve(conf: config.Config, args: argparse.Namespace) -> int:
    """The pass or the loop of ``conf``; 0, or 1 when a move of ``--once`` failed."""
    from cortex.cmd.manage import with_services
    from cortex.descheduler.config import limits, load_detectors

    setup_logging(conf)
    detectors = load_detectors(conf)  # a bad file stops here, before anything runs
    dry_run = conf.get("descheduler", "dry_run") if args.dry_run is None else args.dry_run
    if not dry_run:
        require_extra("sync", "openstack", "keystoneauth1")
    def work(services) -> int:
        if args.once:
            return _once(conf, services, detectors, limits(conf), not dry_run, args.format)
        return _loop(conf, services, detectors, limits(conf), not dry_run)

    return with_services(conf, work)


def _mover(conf: config.Config):
    """The NovaMover of ``conf``'s ``[openstack]`` credentials."""
    from cortex.descheduler.nova import NovaMover
    from cortex.sync.openstack import SourceError, connect

    try:
        connection = connect(conf)
    except SourceError as exc:
        raise CommandError(str(exc), 2) from None
    return NovaMover(connection, conf.get("descheduler", "move_timeout"),
                     conf.get("descheduler", "poll_interval"))


def _pass(conf, services, detectors, run_limits, execute, metrics=None):
    """One pass (:func:`cortex.descheduler.runner.run_once`)."""
    from cortex.descheduler.runner import run_once

    return run_once(services, detectors, run_limits, execute,
                    conf.get("descheduler", "cooldown"),
                    mover=lambda: _mover(conf),
                    record=conf.get("descheduler", "record_decisions"), metrics=metrics)


def _once(conf, services, detectors, run_limits, execute: bool, fmt: str) -> int:
    """One pass, its moves printed, then the earlier passes' open moves as Nova answered.

    1 when a move asked of Nova did not complete, or Nova could not be asked about an
    earlier move.
    """
    from cortex.scheduler.service import SchedulingFailed

    try:
        report = _pass(conf, services, detectors, run_limits, execute)
    except SchedulingFailed as exc:
        raise CommandError(f"the scheduler cannot answer: {exc.detail}") from None
    rows = [r.as_dict() for r in report.results]
    followed = [r.as_dict() for r in report.followed]
    emit(rows, COLUMNS, fmt, {"run_id": report.run_id, "executed": report.executed,
                              "moves": rows, "followed": followed})
    if fmt == "table" and not rows:
        print("no moves: no detector found an instance worth moving")
    if fmt == "table" and followed:
        print("\nmoves of earlier passes that were open:")
        emit(followed, COLUMNS, fmt)
    return 1 if report.failed or report.not_asked else 0


def _loop(conf, services, detectors, run_limits, execute: bool) -> int:
    """The leader's passes until SIGTERM/SIGINT, metrics served; 0."""
    from cortex.descheduler.loop import DESCHEDULER_LOCK_ID, DeschedulerLoop
    from cortex.descheduler.runner import DeschedulerMetrics
    from cortex.sync.leader import LeaderLock

    metrics = DeschedulerMetrics()
    port = conf.get("descheduler", "metrics_port")
    if port:
        from prometheus_client import start_http_server

        start_http_server(port, conf.get("descheduler", "metrics_host"),
                          registry=metrics.registry)
    loop = DeschedulerLoop(
        lambda: _pass(conf, services, detectors, run_limits, execute, metrics),
        LeaderLock(services.engine, DESCHEDULER_LOCK_ID), conf.get("descheduler", "interval"),
        on_failure=lambda: metrics.runs.labels("failed").inc())
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: loop.stop())
    LOG.info("cortex-descheduler: %s, a pass every %g s, detectors %s",
             "executing moves" if execute else "dry run", conf.get("descheduler", "interval"),
             ", ".join(d.name for d in detectors))
    loop.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
