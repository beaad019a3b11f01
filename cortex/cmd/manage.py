"""cortex-manage: database, fleet, network topology, config, plugins, decisions, simulator."""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from cortex import conf as config
from cortex.cli import CommandError, add_format, emit, parser, require_extra, run
from cortex.cmd import capacity as capacity_command
from cortex.db import migrate
from cortex.db.engine import make_engine
from cortex.knowledge.loader import load_view
from cortex.knowledge.network import MetadataKeys, NetworkTopologyError, read_topology_file
from cortex.pipeline.config import PipelineConfigError, load_pipelines
from cortex.pipeline.explain import explain, render_text
from cortex.plugins.base import describe_options
from cortex.plugins.registry import DETECTORS, FILTERS, WEIGHERS, load_all
from cortex.services import reservations
from cortex.simulator.commitments import CommitmentInvalid
from cortex.simulator.fleet import SimulationError
from cortex.store.decisions import DecisionStore
from cortex.store.fleet import FleetError, import_fleet, read_fleet
from cortex.store.network import store_topology
from cortex.store.reservations import ReservationStore


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
    """Validate the configuration as the service would at start, and the pipelines file.

    Option values are checked when ``conf`` loads; here also what only the API parses:
    ``[api] static_tokens`` and ``[gpu] pci_alias``/``device_profiles``. Any error is
    one line (ConfigError, exit 2).
    """
    from cortex.api.app import device_catalog
    from cortex.api.auth import parse_static_tokens

    parse_static_tokens(conf.get("api", "static_tokens"))
    device_catalog(conf)
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
    """Every filter, weigher and detector: name, kind, services; ``-f json|yaml`` add docs.

    A row: ``{"name", "kind": "filter"|"weigher"|"detector", "services": [str], "doc":
    str, "options": [{"name", "type", "default"}]}``, filters first, each kind by name
    (a descheduler detector serves nova).
    """
    load_all()
    rows = [{"name": name, "kind": kind, "services": list(getattr(cls, "services", ("nova",))),
             "doc": inspect.getdoc(sys.modules[cls.__module__]) or "",
             "options": [{"name": option, "type": type_name, "default": default}
                         for option, type_name, default in describe_options(cls)]}
            for kind, table in (("filter", FILTERS), ("weigher", WEIGHERS),
                                ("detector", DETECTORS))
            for name, cls in sorted(table.items())]
    emit(rows, ("name", "kind", "services"), args.format)
    return 0


def decisions_prune(conf: config.Config, args) -> int:
    """Delete decisions older than the retention."""
    days = args.days if args.days is not None else conf.get("scheduler", "decision_retention_days")
    deleted = DecisionStore(make_engine(conf.database_url)).prune(days)
    print(f"pruned {deleted} decisions older than {days:g} days")
    return 0


DECISION_COLUMNS = ("time", "service", "resource_id", "pipeline", "hosts_in", "hosts_out",
                    "first_host")


def decisions_list(conf: config.Config, args) -> int:
    """The newest ``--limit`` decisions (of a resource or request), newest first, one row each.

    A row: the :data:`DECISION_COLUMNS` (``time`` in UTC to the second, ``hosts_in`` the
    candidates Nova/Cinder/Manila sent, ``hosts_out`` the hosts answered, ``first_host``
    the first of them or None) plus ``id``, ``request_id``, ``intent``, ``outcome`` and
    ``duration_ms`` for ``-f json|yaml``. ``cortex-manage explain`` shows a whole decision.
    """
    store = DecisionStore(make_engine(conf.database_url))
    found = store.find(resource_id=args.resource_id, request_id=args.request_id,
                       limit=args.limit)
    rows = [{"time": _utc(d.created_at), "service": d.service,
             "resource_id": d.resource_id, "pipeline": d.pipeline,
             "hosts_in": len(d.hosts), "hosts_out": len(d.result or ()),
             "first_host": (d.result or (None,))[0], "id": d.id,
             "request_id": d.request_id, "intent": d.intent, "outcome": d.outcome,
             "duration_ms": d.duration_ms} for d in found]
    emit(rows, DECISION_COLUMNS, args.format)
    return 0


FORECAST_COLUMNS = ("model", "flavor_family", "availability_zone", "supply_gpus", "used_gpus",
                    "demand_gpus_per_day", "forecast_gpus_per_day", "days_to_exhaustion",
                    "days_to_exhaustion_pessimistic", "skill")


def horizon(text: str) -> float:
    """A horizon in days from ``14d``, ``36h``, ``2w`` or a number of days (argparse type)."""
    units = {"h": 1 / 24, "d": 1.0, "w": 7.0}
    raw, unit = (text[:-1], text[-1].lower()) if text and text[-1].lower() in units else (
        text, "d")
    try:
        days = float(raw) * units[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"horizon {text!r} is not a number of hours, days or weeks (36h, 14d, 2w)") from None
    if not 1 / 24 <= days <= 90:
        raise argparse.ArgumentTypeError(f"horizon {text!r} must be between 1h and 90d")
    return days


def forecast(conf: config.Config, args) -> int:
    """Forecast GPU demand per model and zone, and the days until the GPUs run out.

    Computed now from the decision log's GPU demand and the knowledge
    (:func:`cortex.forecast.run.compute`); ``--store`` also replaces the stored forecasts
    that ``GET /v1/forecasts`` and the metrics serve. Table columns:
    :data:`FORECAST_COLUMNS` (``skill``: the backtest's skill against seasonal naive),
    then each flavor family's flavors against the instances that fit now
    (:func:`cortex.cmd.capacity.print_placeable`); ``-f json|yaml`` prints the
    documents, with their series when ``--series``. Needs the ``forecast`` extra
    (statsmodels).
    """
    require_extra("forecast", "statsmodels")
    from cortex.cmd.capacity import flavor_supply, print_placeable
    from cortex.forecast.run import compute, settings_from_conf
    from cortex.services.forecasts import with_placeable
    from cortex.store.demand import ForecastStore, without_series

    engine = make_engine(conf.database_url)
    documents = compute(engine, settings_from_conf(conf, args.horizon))
    if args.store:
        ForecastStore(engine).replace(documents)
    documents = with_placeable(documents, flavor_supply(conf, with_services))
    rows = [without_series(d) | {"skill": (d["backtest"] or {}).get("skill")}
            for d in documents]
    emit(rows, FORECAST_COLUMNS, args.format,
         document=documents if args.series else [without_series(d) for d in documents])
    print_placeable(documents, args.format)
    return 0


def demand_generate(conf: config.Config, args) -> int:
    """Write ``--days`` of synthetic GPU demand ending now (demo and tests only).

    The streams of :data:`cortex.forecast.history.DEMO_STREAMS` (the demo fleet's models),
    seeded by ``--seed``; prints how many rows were written. Needs the ``forecast`` extra
    (numpy).
    """
    require_extra("forecast", "numpy")
    from cortex.forecast.history import DEMO_STREAMS, generate
    from cortex.store.demand import DemandStore

    written = DemandStore(make_engine(conf.database_url)).add(
        generate(DEMO_STREAMS, datetime.now(UTC), args.days, args.seed))
    print(f"wrote {written} synthetic GPU demand rows over {args.days:g} days")
    return 0


def _utc(moment: datetime) -> str:
    """A time as ``YYYY-MM-DDTHH:MM:SSZ`` (UTC; a time without a zone is UTC)."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


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
    """Every host's network location with its source, as the scheduler sees it.

    ``table``: the hosts (host, spine, leaf, block, source), then the leaves (name,
    spine, hosts: how many, uplink_gbps, adjacent leaves, source); ``value``: the hosts'
    rows; ``json``/``yaml``: the ``GET /v1/network-topology`` document.
    """
    view = load_view(make_engine(conf.database_url),
                     network_keys=MetadataKeys.from_conf(conf))
    document = view.network.as_dict()
    emit(document["hosts"], ("host", "spine", "leaf", "block", "source"), args.format,
         document=document)
    if args.format == "table":
        print()
        emit([leaf | {"hosts": len(leaf["hosts"])} for leaf in document["leaves"]],
             ("name", "spine", "hosts", "uplink_gbps", "adjacent", "source"), "table")
    return 0


RESERVATION_COLUMNS = ("id", "host", "instance_uuid", "group_id", "resources", "gpus",
                       "expires_at")


def reservations_list(conf: config.Config, args) -> int:
    """The unexpired in-flight reservations, oldest first, one row each.

    With ``--groups``: the unexpired group promises instead, as
    :func:`cortex.services.reservations.group_rows` gives them.

    A row: :data:`RESERVATION_COLUMNS`; ``resources`` is ``{resource class: amount}``,
    ``gpus`` the PCI addresses held, ``expires_at`` UTC to the second.
    """
    store = ReservationStore(make_engine(conf.database_url))
    if args.groups:
        emit(reservations.group_rows(store, datetime.now(UTC)), reservations.GROUP_COLUMNS,
             args.format)
        return 0
    found = store.active(datetime.now(UTC))
    emit([{"id": r.id, "host": r.host, "instance_uuid": r.instance_uuid,
           "group_id": r.group_id, "resources": dict(r.resources), "gpus": list(r.gpus),
           "expires_at": _utc(r.expires_at)}
          for r in sorted(found, key=lambda r: r.created_at)], RESERVATION_COLUMNS, args.format)
    return 0


COMMITMENT_COLUMNS = ("id", "project_id", "availability_zone", "count", "gpus", "products",
                      "vcpus", "memory_mb", "state", "in_use", "hosts", "end_at")


def _commitment_rows(documents: list[dict]) -> list[dict]:
    """Table rows of commitment documents: ``hosts`` the held hosts with their holds."""
    rows = []
    for document in documents:
        held: dict[str, int] = {}
        for hold in sorted(document["holds"], key=lambda h: h["host"]):
            held[hold["host"]] = held.get(hold["host"], 0) + 1
        rows.append({**document, "hosts": held})
    return rows


def with_services(conf: config.Config, work):
    """``work(services)`` on the API's services (knowledge, scheduler) for ``conf``'s database.

    The services are closed (decision log flushed, knowledge checker stopped) after it;
    cortex-descheduler runs its passes in it too.
    """
    import logging

    from cortex.api.app import create_app

    # the API's warnings about its own authentication say nothing about this command
    quiet = logging.getLogger("cortex.api.app")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        app = create_app(conf)
    finally:
        quiet.setLevel(level)
    services = app.extensions["cortex"]
    try:
        return work(services)
    finally:
        services.decisions.close()
        services.knowledge.close()


def commitments_create(conf: config.Config, args) -> int:
    """Place a commitment through the pipelines and store it; print it (``-f`` as lists)."""
    from cortex.api.commitments import commit
    from cortex.services.commitments import (
        CommitmentLockTimeout,
        CommitmentRefused,
        CommitmentTimedOut,
        commitment_document,
    )

    body = {"project_id": args.project, "availability_zone": args.availability_zone,
            "vcpus": args.vcpus, "memory_mb": args.memory_mb, "gpus": args.gpus,
            "products": args.product or [], "count": args.count, "end_at": args.end,
            "description": args.description}
    if args.start:
        body["start_at"] = args.start
    now = datetime.now(UTC)

    def work(services):
        try:
            made, _ = commit(services, body, now)
        except (CommitmentRefused, CommitmentTimedOut, CommitmentLockTimeout) as exc:
            raise CommandError(str(exc), 1) from None
        return commitment_document(made, services.knowledge.view().hosts, now)

    document = with_services(conf, work)
    emit(_commitment_rows([document]), COMMITMENT_COLUMNS, args.format, document)
    return 0


def commitments_list(conf: config.Config, args) -> int:
    """Every commitment, oldest first, one row each; ``show ID`` one, whole."""
    from cortex.store.commitments import commitment_document, list_commitments

    engine = make_engine(conf.database_url)
    with engine.connect() as connection:
        found = list_commitments(connection)
    hosts = load_view(engine).hosts
    now = datetime.now(UTC)
    documents = [commitment_document(c, hosts, now) for c in found
                 if getattr(args, "id", None) in (None, c.id)]
    if getattr(args, "id", None) and not documents:
        raise CommandError(f"no commitment {args.id}", 1)
    emit(_commitment_rows(documents), COMMITMENT_COLUMNS, args.format,
         documents[0] if getattr(args, "id", None) else documents)
    return 0


def commitments_delete(conf: config.Config, args) -> int:
    """Delete a commitment; its room is free from the API workers' next view on."""
    from cortex.store.commitments import delete_commitment

    with make_engine(conf.database_url).begin() as connection:
        if not delete_commitment(connection, args.id):
            raise CommandError(f"no commitment {args.id}", 1)
    print(f"deleted commitment {args.id}")
    return 0


def reservations_prune(conf: config.Config, args) -> int:
    """Delete expired group promises and in-flight reservations."""
    groups, deleted = reservations.prune(ReservationStore(make_engine(conf.database_url)),
                                         datetime.now(UTC))
    print(f"pruned {groups} expired group promises and {deleted} expired reservations")
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
    if args.format == "json" and args.seeds > 1:
        require_extra("simulate", "scipy")
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
        synthetic=SyntheticSpec(requests=args.requests, seed=args.seed, load=args.load),
        seeds=args.seeds, device_order=args.device_order,
        fragmentation_sizes=args.fragmentation_sizes, candidate_order=args.candidate_order,
        gpu_sharing=args.gpu_sharing, vgpu_slots=args.vgpu_slots,
        mig_requests=args.mig_requests)
    results = run(spec, progress=lambda line: print(line, file=sys.stderr))
    if args.format == "json":
        print(json.dumps({"scenarios": [
            {"fleet": r.fleet.name, "hosts": len(r.fleet.hosts), "gpus": r.fleet.gpus,
             "trace": r.trace_name, "requests": r.requests,
             "pipelines": report.summary(r.by_seed)} for r in results]}, indent=1))
    for fleet_runs in results:
        fleet = fleet_runs.fleet
        title = (f"fleet {fleet.name} ({len(fleet.hosts)} hosts, {fleet.gpus} GPUs), "
                 f"trace {fleet_runs.trace_name}")
        if args.format == "table":
            print(f"\n### {title}\n")
            print(report.table(fleet_runs.runs))
        if args.plot:
            path = Path(args.plot)
            if len(results) > 1:
                path = path.with_name(f"{path.stem}-{fleet.name}{path.suffix}")
            written = report.plot(fleet_runs.by_seed or [fleet_runs.runs], path, title)
            print(f"\nplot: {written}", file=sys.stderr if args.format == "json" else sys.stdout)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every sub-command."""
    result = parser(
        "cortex-manage", __doc__,
        needs="the base package (pip install cortex-scheduler); forecast and demand "
              "generate need the forecast extra, sync the sync extra, simulate with --plot "
              "or with --seeds N and --format json the simulate extra; each sub-command's "
              "--help says so.")
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
    listing = plugins.add_parser("list", help="filters and weighers")
    add_format(listing)
    listing.set_defaults(func=plugins_list)
    decisions = sub.add_parser("decisions", help="decision log").add_subparsers(
        dest="action", required=True)
    prune = decisions.add_parser("prune", help="delete old decisions")
    prune.add_argument("--days", type=float, help="default: [scheduler] decision_retention_days")
    prune.set_defaults(func=decisions_prune)
    listing = decisions.add_parser("list", help="newest decisions, one line each")
    listing.add_argument("--resource-id")
    listing.add_argument("--request-id")
    listing.add_argument("--limit", type=int, default=10)
    add_format(listing)
    listing.set_defaults(func=decisions_list)
    text = "sync sources from OpenStack and Prometheus (needs the sync extra)"
    sync = sub.add_parser("sync", help=text, description=text)
    sync.add_argument("--once", action="store_true", help="run each source once and exit")
    sync.add_argument("--source", action="append", metavar="NAME",
                      choices=config.SYNC_SOURCES,
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
    capacity_command.add_parser(sub, with_services)
    return result


def _network_parsers(sub) -> None:
    """The ``network`` and ``reservations`` sub-commands."""
    network = sub.add_parser("network", help="leaf/spine network topology").add_subparsers(
        dest="action", required=True)
    load = network.add_parser("load", help="store a topology file (replaces the last one)")
    load.add_argument("file")
    load.set_defaults(func=network_load)
    show = network.add_parser("show", help="hosts' network locations and their source")
    add_format(show)
    show.add_argument("--json", dest="format", action="store_const", const="json",
                      help="the topology as JSON (-f json)")
    show.set_defaults(func=network_show)
    held = sub.add_parser("reservations", help="in-flight reservations").add_subparsers(
        dest="action", required=True)
    listing = held.add_parser("list", help="unexpired reservations")
    add_format(listing)
    listing.add_argument("--groups", action="store_true",
                         help="list the group promises (members, hosts, expiry) instead")
    listing.set_defaults(func=reservations_list)
    held.add_parser("prune", help="delete expired reservations").set_defaults(
        func=reservations_prune)
    committed = sub.add_parser("commitments", help="committed reservations").add_subparsers(
        dest="action", required=True)
    create = committed.add_parser("create", help="place a commitment and keep its room")
    create.add_argument("--project", required=True, help="the project it is for")
    create.add_argument("--availability-zone", help="where (default: any host)")
    create.add_argument("--vcpus", type=int, required=True, help="vCPUs per instance")
    create.add_argument("--memory-mb", type=int, required=True, help="MiB per instance")
    create.add_argument("--gpus", type=int, default=0, help="GPUs per instance (one set)")
    create.add_argument("--product", action="append",
                        help="PCI product id a GPU may be (repeatable; none: any)")
    create.add_argument("--count", type=int, required=True, help="instances")
    create.add_argument("--start", help="ISO 8601 start (default: now)")
    create.add_argument("--end", required=True, help="ISO 8601 end")
    create.add_argument("--description")
    add_format(create)
    create.set_defaults(func=commitments_create)
    listing = committed.add_parser("list", help="every commitment")
    add_format(listing)
    listing.set_defaults(func=commitments_list)
    show = committed.add_parser("show", help="one commitment")
    show.add_argument("id")
    add_format(show)
    show.set_defaults(func=commitments_list)
    gone = committed.add_parser("delete", help="delete a commitment")
    gone.add_argument("id")
    gone.set_defaults(func=commitments_delete)


def _simulate_parser(sub) -> None:
    """The ``simulate`` sub-command's arguments."""
    text = "GPU demand forecasts and days to exhaustion (needs the forecast extra)"
    ahead = sub.add_parser("forecast", help=text, description=text)
    ahead.add_argument("--horizon", type=horizon, default=None,
                       help="how far ahead: 36h, 14d, 2w (default [forecast] horizon_days)")
    ahead.add_argument("--store", action="store_true",
                       help="also store them for GET /v1/forecasts and the metrics")
    ahead.add_argument("--series", action="store_true",
                       help="with -f json|yaml: include the hourly history and forecast")
    add_format(ahead)
    ahead.set_defaults(func=forecast)
    demand = sub.add_parser("demand", help="recorded GPU demand").add_subparsers(
        dest="action", required=True)
    text = "write synthetic demand, demo and tests only (needs the forecast extra)"
    made = demand.add_parser("generate", help=text, description=text)
    made.add_argument("--days", type=float, default=90.0)
    made.add_argument("--seed", type=int, default=0)
    made.set_defaults(func=demand_generate)
    text = ("replay a GPU trace through pipelines, no database (--plot, and --seeds with "
            "--format json, need the simulate extra)")
    sim = sub.add_parser("simulate", help=text, description=text)
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
    sim.add_argument("--device-order", choices=("pci", "shuffled"), default="pci",
                     help="the simulated nova-computes' PCI device order: pci (what the "
                          "weighers assume) or shuffled per host (their prediction errors)")
    sim.add_argument("--candidate-order", choices=("fleet", "shuffled"), default="fleet",
                     help="the order Nova offers the hosts in, which decides ties: the "
                          "fleet's (Nova's defaults) or shuffled per arrival")
    sim.add_argument("--fragmentation-sizes", choices=("options", "trace"), default="options",
                     help="weigher_gpu_fragmentation's request sizes: each pipeline's options "
                          "or the trace's own distribution (as sizes_from: demand learns it)")
    sim.add_argument("--models", help="Alibaba model rules (default: shipped)")
    sim.add_argument("--gpu-sharing", choices=("vgpu-hosts", "any"),
                     help="Alibaba: fractional pods on a share of vGPU hosts (as Nova can) "
                          "or on any GPU not passed through (Weng et al.'s setting); "
                          "default: the model rules'")
    sim.add_argument("--vgpu-slots", type=int, metavar="N",
                     help="Alibaba: vGPUs of one GPU, the fractions' granularity "
                          "(default: the model rules')")
    sim.add_argument("--mig-requests", action="store_true",
                     help="Alibaba: fractional pods ask one vGPU of the MIG profile with "
                          "their share of the GPU's compute (for fleets of boards with a "
                          "mig layout)")
    sim.add_argument("--plot", metavar="PNG", help="write a plot (one per fleet: -<fleet>)")
    sim.add_argument("--seeds", type=int, default=1, metavar="N",
                     help="replay N variants: the synthetic seed (or --shuffle's) counted up")
    sim.add_argument("--format", choices=("table", "json"), default="table",
                     help="json: per fleet and pipeline, means and 95 %% intervals over the "
                          "seeds, paired differences, unallocated GPUs at 50/100/120 %% "
                          "arrived")
    sim.set_defaults(func=simulate)


def main(argv: list[str] | None = None) -> int:
    """Run one sub-command; errors are one line on stderr (exit statuses: cortex.cli).

    Input errors (configuration, fleet, pipelines, simulation, topology files) exit 2.
    """
    args = build_parser().parse_args(argv)
    return run("cortex-manage", args, lambda conf: args.func(conf, args),
               expected=(FleetError, PipelineConfigError, SimulationError,
                         NetworkTopologyError, CommitmentInvalid))


if __name__ == "__main__":
    sys.exit(main())
