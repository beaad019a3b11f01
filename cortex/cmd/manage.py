"""cortex-manage: database, fleet, network topology, config, plugins, decisions, simulator."""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from cortex import conf as config
from cortex.cmd.common import parser, require_extra, run
from cortex.db import migrate
from cortex.db.engine import make_engine
from cortex.knowledge.decisions import DecisionStore
from cortex.knowledge.fleet import FleetError, import_fleet, read_fleet
from cortex.knowledge.loader import load_view
from cortex.knowledge.network import MetadataKeys, NetworkTopologyError, read_topology_file
from cortex.knowledge.network_store import store_topology
from cortex.knowledge.reservation_store import ReservationStore
from cortex.pipeline.config import PipelineConfigError, load_pipelines
from cortex.pipeline.explain import explain, render_text
from cortex.plugins.base import describe_options
from cortex.plugins.registry import FILTERS, WEIGHERS, load_all
from cortex.simulator.fleet import SimulationError


def db_upgrade(conf: config.Config, args) -> int:
    """Upgrade the schema to the newest revision."""
    engine = make_engine(conf.database_url)
    migrate.upgrade(engine, args.revision)
    print(f"database at revision {migrate.current_revision(engine)}")
    return 0


def db_version(conf: config.Config, args) -> int:
    """Print the database's revision and the newest one shipped."""
    engine = make_engine(conf.database_url)
    print(f"current: {migrate.current_revision(engine)}  head: {migrate.head_revision()}")
    return 0


def _store(conf: config.Config, store, document) -> int:
    """``store(connection, document)`` in one transaction; print the counts it returns."""
    with make_engine(conf.database_url).begin() as connection:
        counts = store(connection, document)
    print("loaded " + ", ".join(f"{n} {k}" for k, n in counts.items()))
    return 0


def load_fleet(conf: config.Config, args) -> int:
    """Replace the knowledge tables with a fleet file, in one transaction."""
    return _store(conf, import_fleet, read_fleet(args.file))


def config_check(conf: config.Config, args) -> int:
    """Validate the configuration and the pipelines file."""
    path = conf.get("scheduler", "pipelines_file") or config.shipped_file("pipelines.yaml")
    pipelines = load_pipelines(path)
    print(f"configuration OK: {conf.source or 'built-in defaults'}; "
          f"{len(pipelines.pipelines)} pipelines in {path}")
    return 0


def config_sample(conf: config.Config, args) -> int:
    """Print the sample configuration file."""
    sys.stdout.write(config.sample())
    return 0


def plugins_list(conf: config.Config, args) -> int:
    """Every filter and weigher with its services, options and docstring."""
    load_all()
    for kind, table in (("filter", FILTERS), ("weigher", WEIGHERS)):
        for name in sorted(table):
            cls = table[name]
            module_doc = inspect.getdoc(sys.modules[cls.__module__]) or ""
            print(f"{name} ({kind}; services: {', '.join(cls.services)})")
            for line in module_doc.splitlines():
                print(f"    {line}")
            for option, kind_name, default in describe_options(cls):
                print(f"    option {option}: {kind_name} = {default!r}")
            print()
    return 0


def decisions_prune(conf: config.Config, args) -> int:
    """Delete decisions older than the retention."""
    days = args.days if args.days is not None else conf.get("scheduler", "decision_retention_days")
    deleted = DecisionStore(make_engine(conf.database_url)).prune(days)
    print(f"pruned {deleted} decisions older than {days:g} days")
    return 0


def decisions_list(conf: config.Config, args) -> int:
    """Print the newest decisions for a resource or request as JSON."""
    store = DecisionStore(make_engine(conf.database_url))
    found = store.find(resource_id=args.resource_id, request_id=args.request_id,
                       limit=args.limit)
    print(json.dumps(found, indent=2, default=str))
    return 0


def sync_once(conf: config.Config, args) -> int:
    """Sync every enabled source (or ``--source NAME``) once, each in one transaction."""
    from cortex.cmd.sync import run_once

    if not args.once:
        print("cortex-manage: sync needs --once (the long-running sync is cortex-sync)",
              file=sys.stderr)
        return 2
    return run_once(conf, tuple(args.source) if args.source else None)


def explain_decision(conf: config.Config, args) -> int:
    """Explain a decision named by its id, its instance/volume/share id or request id."""
    store = DecisionStore(make_engine(conf.database_url))
    decision, matches = store.resolve(args.key)
    if decision is None:
        print(f"cortex-manage: no decision, resource or request {args.key!r}", file=sys.stderr)
        return 1
    explanation = explain(decision)
    if args.json:
        print(json.dumps(explanation, indent=2, default=str))
        return 0
    sys.stdout.write(render_text(explanation, max_hosts=args.hosts))
    if matches > 1:
        print(f"\n(the newest of {matches} decisions matching {args.key}; "
              "'cortex-manage decisions list' shows them all)")
    return 0


def network_load(conf: config.Config, args) -> int:
    """Replace the stored topology file with ``args.file``, in one transaction."""
    return _store(conf, store_topology, read_topology_file(args.file))


def network_show(conf: config.Config, args) -> int:
    """Print every host's network location with its source, as the scheduler sees it."""
    view = load_view(make_engine(conf.database_url),
                     network_keys=MetadataKeys.from_conf(conf))
    document = view.network.as_dict()
    if args.json:
        print(json.dumps(document, indent=2))
        return 0
    print(f"{'host':<24} {'spine':<12} {'leaf':<12} {'block':<10} source")
    for row in document["hosts"]:
        print(f"{row['host']:<24} {row['spine'] or '-':<12} {row['leaf']:<12} "
              f"{row['block'] or '-':<10} {row['source']}")
    for leaf in document["leaves"]:
        print(f"leaf {leaf['name']}: spine {leaf['spine'] or '-'}, {len(leaf['hosts'])} hosts, "
              f"uplink {leaf['uplink_gbps'] or '?'} Gbit/s, adjacent "
              f"{', '.join(leaf['adjacent']) or '-'} ({leaf['source']})")
    return 0


def reservations_list(conf: config.Config, args) -> int:
    """Print the unexpired in-flight reservations as JSON."""
    found = ReservationStore(make_engine(conf.database_url)).active(datetime.now(UTC))
    print(json.dumps([{"id": r.id, "host": r.host, "instance_uuid": r.instance_uuid,
                       "group_id": r.group_id, "resources": dict(r.resources),
                       "gpus": list(r.gpus), "expires_at": r.expires_at.isoformat()}
                      for r in sorted(found, key=lambda r: r.created_at)], indent=2))
    return 0


def reservations_prune(conf: config.Config, args) -> int:
    """Delete expired in-flight reservations."""
    deleted = ReservationStore(make_engine(conf.database_url)).prune(datetime.now(UTC))
    print(f"pruned {deleted} expired reservations")
    return 0


def simulate_groups(conf: config.Config, args) -> int:
    """Place synthetic groups of GPU VMs on leaf/spine fleets; print the domain table."""
    from cortex.simulator.fleet import read_fleet as read_sim_fleet
    from cortex.simulator.groups import GroupSpec, group_trace, replay_groups, table
    from cortex.simulator.session import resolve_fleet

    path = args.pipelines_file or conf.get("scheduler", "pipelines_file") or \
        config.shipped_file("pipelines.yaml")
    pipelines = load_pipelines(path)
    for name in args.fleet:
        fleet = read_sim_fleet(resolve_fleet(name))
        spec = GroupSpec(groups=args.groups, load=args.load, seed=args.seed)
        groups = group_trace(fleet, spec)
        runs = []
        for pipeline in (args.pipeline, *args.compare):
            runs.append(replay_groups(fleet, groups, pipelines, pipeline, seed=args.seed))
            print(f"{fleet.name}: {pipeline}: {runs[-1].calls} calls in "
                  f"{runs[-1].wall_s:.1f} s", file=sys.stderr)
        print(f"\n### fleet {fleet.name} ({len(fleet.hosts)} hosts, {fleet.gpus} GPUs), "
              f"{len(groups)} groups (seed {spec.seed}, load {spec.load:g})\n")
        print(table(runs, len(groups)))
    return 0


def simulate(conf: config.Config, args) -> int:
    """Replay a GPU trace through pipelines on simulated fleets; print tables, write plots."""
    if args.trace == "groups":
        return simulate_groups(conf, args)
    if args.plot:  # before minutes of simulation, not after
        require_extra("simulate", "matplotlib")
    from cortex.simulator import report
    from cortex.simulator.session import SimulationSpec
    from cortex.simulator.session import simulate as run
    from cortex.simulator.trace import SyntheticSpec

    spec = SimulationSpec(
        fleets=args.fleet, trace=args.trace, pipelines=[args.pipeline, *args.compare],
        pipelines_file=args.pipelines_file or conf.get("scheduler", "pipelines_file") or None,
        mode=args.mode, sample_nodes=args.sample_nodes, limit=args.limit,
        max_rejections=args.max_rejections, pack_numa_cells=args.pack_numa_cells,
        models=args.models, shuffle=args.shuffle,
        synthetic=SyntheticSpec(requests=args.requests, seed=args.seed, load=args.load))
    results = run(spec, progress=lambda line: print(line, file=sys.stderr))
    for fleet_runs in results:
        fleet = fleet_runs.fleet
        title = (f"fleet {fleet.name} ({len(fleet.hosts)} hosts, {fleet.gpus} GPUs), "
                 f"trace {fleet_runs.trace_name}")
        print(f"\n### {title}\n")
        print(report.table(fleet_runs.runs))
        if args.plot:
            path = Path(args.plot)
            if len(results) > 1:
                path = path.with_name(f"{path.stem}-{fleet.name}{path.suffix}")
            print(f"\nplot: {report.plot(fleet_runs.runs, path, title)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every sub-command."""
    result = parser("cortex-manage", __doc__)
    result.add_argument("--config-file", help="cortex.conf (default: $CORTEX_CONFIG_FILE)")
    sub = result.add_subparsers(dest="command", required=True)
    db = sub.add_parser("db", help="schema migrations").add_subparsers(dest="action",
                                                                      required=True)
    up = db.add_parser("upgrade", help="upgrade the schema")
    up.add_argument("revision", nargs="?", default="head")
    up.set_defaults(func=db_upgrade)
    db.add_parser("version", help="current and newest revision").set_defaults(func=db_version)
    fleet = sub.add_parser("load-fleet", help="import a fleet file (YAML/JSON)")
    fleet.add_argument("file")
    fleet.set_defaults(func=load_fleet)
    cfg = sub.add_parser("config", help="configuration").add_subparsers(dest="action",
                                                                       required=True)
    cfg.add_parser("check", help="validate configuration and pipelines").set_defaults(
        func=config_check)
    cfg.add_parser("sample", help="print cortex.conf.sample").set_defaults(func=config_sample)
    plugins = sub.add_parser("plugins", help="plugins").add_subparsers(dest="action",
                                                                      required=True)
    plugins.add_parser("list", help="filters and weighers").set_defaults(func=plugins_list)
    decisions = sub.add_parser("decisions", help="decision log").add_subparsers(
        dest="action", required=True)
    prune = decisions.add_parser("prune", help="delete old decisions")
    prune.add_argument("--days", type=float, help="default: [scheduler] decision_retention_days")
    prune.set_defaults(func=decisions_prune)
    listing = decisions.add_parser("list", help="newest decisions as JSON")
    listing.add_argument("--resource-id")
    listing.add_argument("--request-id")
    listing.add_argument("--limit", type=int, default=10)
    listing.set_defaults(func=decisions_list)
    sync = sub.add_parser("sync", help="sync sources from OpenStack and Prometheus")
    sync.add_argument("--once", action="store_true", help="run each source once and exit")
    sync.add_argument("--source", action="append", metavar="NAME",
                      choices=("nova", "placement", "cinder", "manila", "keystone", "prometheus"),
                      help="only this source (repeatable; default: [sync] sources)")
    sync.set_defaults(func=sync_once)
    why = sub.add_parser("explain", help="why a decision came out as it did")
    why.add_argument("key", help="decision id, instance/volume/share uuid or request id "
                                 "(the newest decision of a resource or request)")
    why.add_argument("--json", action="store_true", help="the explanation as JSON")
    why.add_argument("--hosts", type=int, default=10, help="ranked hosts to list (default 10)")
    why.set_defaults(func=explain_decision)
    _network_parsers(sub)
    _simulate_parser(sub)
    return result


def _network_parsers(sub) -> None:
    """The ``network`` and ``reservations`` sub-commands."""
    network = sub.add_parser("network", help="leaf/spine network topology").add_subparsers(
        dest="action", required=True)
    load = network.add_parser("load", help="store a topology file (replaces the last one)")
    load.add_argument("file")
    load.set_defaults(func=network_load)
    show = network.add_parser("show", help="hosts' network locations and their source")
    show.add_argument("--json", action="store_true", help="the topology as JSON")
    show.set_defaults(func=network_show)
    held = sub.add_parser("reservations", help="in-flight reservations").add_subparsers(
        dest="action", required=True)
    held.add_parser("list", help="unexpired reservations as JSON").set_defaults(
        func=reservations_list)
    held.add_parser("prune", help="delete expired reservations").set_defaults(
        func=reservations_prune)


def _simulate_parser(sub) -> None:
    """The ``simulate`` sub-command's arguments."""
    sim = sub.add_parser("simulate", help="replay a GPU trace through pipelines (no database)")
    sim.add_argument("--fleet", action="append", required=True, metavar="FLEET",
                     help="fleet file, Alibaba node CSV, or shipped fleet (hgx, mixed); "
                          "repeatable")
    sim.add_argument("--trace", required=True,
                     help="trace file, Alibaba pod CSV, 'synthetic', or 'groups' (groups of "
                          "2-16 GPU VMs on a fleet with a network topology, e.g. leafspine)")
    sim.add_argument("--groups", type=int, default=200, help="groups: how many groups")
    sim.add_argument("--pipeline", required=True, help="the pipeline to measure")
    sim.add_argument("--compare", action="append", default=[], metavar="PIPELINE",
                     help="a pipeline to compare with (repeatable)")
    sim.add_argument("--pipelines-file", help="default: [scheduler] pipelines_file or shipped")
    sim.add_argument("--mode", choices=("timeline", "fill"), default="timeline",
                     help="timeline: requests leave at their departure; fill: they stay")
    sim.add_argument("--sample-nodes", type=int, default=1, metavar="N",
                     help="keep every N-th node of each kind of an Alibaba node list")
    sim.add_argument("--limit", type=int, help="replay the first N requests only")
    sim.add_argument("--max-rejections", type=int, metavar="N",
                     help="stop a replay after N rejected requests")
    sim.add_argument("--shuffle", type=int, metavar="SEED",
                     help="fill mode: replay the requests in an order shuffled with SEED")
    sim.add_argument("--requests", type=int, default=1000, help="synthetic: requests")
    sim.add_argument("--seed", type=int, default=1, help="synthetic: random seed")
    sim.add_argument("--load", type=float, default=1.2,
                     help="synthetic: offered GPU load over the fleet's GPUs")
    sim.add_argument("--pack-numa-cells", action="store_true",
                     help="the computes run [compute] packing_host_numa_cells_allocation_"
                          "strategy = True")
    sim.add_argument("--models", help="Alibaba model rules (default: shipped)")
    sim.add_argument("--plot", metavar="PNG", help="write a plot (one per fleet: -<fleet>)")
    sim.set_defaults(func=simulate)


def main(argv: list[str] | None = None) -> int:
    """Run one sub-command; errors are one line on stderr (exit statuses: cortex.cmd.common).

    Input errors (configuration, fleet, pipelines, simulation, topology files) exit 2.
    """
    args = build_parser().parse_args(argv)
    return run("cortex-manage", args, lambda conf: args.func(conf, args),
               expected=(FleetError, PipelineConfigError, SimulationError,
                         NetworkTopologyError))


if __name__ == "__main__":
    sys.exit(main())
