"""Configuration: an INI file (``cortex.conf``), environment overrides and built-in defaults.

Every option is declared once in :data:`OPTIONS`; the sample file
``etc/cortex/cortex.conf.sample`` is generated from it (``cortex-manage config
sample``) and a test keeps the two equal. Precedence, highest first: the
environment variable ``CORTEX_<SECTION>_<OPTION>`` (``CORTEX_DATABASE_CONNECTION``),
the file given by ``--config-file`` or ``CORTEX_CONFIG_FILE``, the default. A
``CORTEX_*`` variable that names no option (and is none of :data:`OTHER_VARIABLES`) is
refused at load, as an unknown option in the file is: a typo must not be ignored.
"""

from __future__ import annotations

import configparser
import difflib
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CONFIG_FILE_ENV = "CORTEX_CONFIG_FILE"
#: The sources cortex-sync knows (``[sync] sources``).
SYNC_SOURCES = ("nova", "placement", "cinder", "manila", "keystone", "prometheus", "forecast")
#: Sections handed as they are to a library that declares its own options.
PASSTHROUGH_SECTIONS = ("keystone_authtoken",)
#: ``CORTEX_*`` environment variables that are not options, and what reads them.
OTHER_VARIABLES = {
    CONFIG_FILE_ENV: "the configuration file (cortex.conf.load)",
    "CORTEX_AGENT_TOKEN": "cortex-agent's token when --token-file is not given",
    "CORTEX_BIND": "gunicorn's listening address (etc/cortex/gunicorn.conf.py)",
    "CORTEX_WORKERS": "gunicorn's worker processes (etc/cortex/gunicorn.conf.py)",
    "CORTEX_THREADS": "gunicorn's threads per worker (etc/cortex/gunicorn.conf.py)",
    "CORTEX_RECORD_DECISIONS": "the test suite: re-record tests/fixtures decisions",
}
#: Prefixes of the test suite's and the benchmarks' own variables (``CORTEX_TEST_CACHE``).
OTHER_PREFIXES = ("CORTEX_TEST_", "CORTEX_BENCH_", "CORTEX_DIFFERENTIAL_")


class ConfigError(ValueError):
    """A configuration file or value cannot be used; the message names the option."""


@dataclass(frozen=True)
class Option:
    """One option, declared once, as oslo.config declares them.

    ``section``/``name``; ``type`` is str, int, float or bool; ``default`` is of that
    type; ``help`` is the sample file's text. Constraints, checked at load:
    ``choices`` (the allowed values; for a ``list_of`` option, the allowed items),
    ``minimum``/``maximum`` (inclusive bounds of an int or float), ``list_of``
    (the value is a comma-separated list whose items must be in ``choices``),
    ``validate`` (a function of the value that raises ValueError, its message saying
    why, for a form the others cannot express, e.g. :func:`zone_values`) with ``form``
    saying in words what it accepts.
    """

    section: str
    name: str
    type: type
    default: Any
    help: str
    choices: tuple[str, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    list_of: bool = False
    validate: Callable[[Any], Any] | None = None
    form: str | None = None

    def allowed(self) -> str:
        """What the option accepts, in words: ``one of keep, drop``, ``an int >= 1``."""
        if self.form is not None:
            return self.form
        if self.choices is not None:
            shown = ", ".join(repr(c) if c == "" else c for c in self.choices)
            return f"a comma-separated list of {shown}" if self.list_of else f"one of {shown}"
        kind = "an int" if self.type is int else f"a {self.type.__name__}"
        if self.minimum is not None and self.maximum is not None:
            return f"{kind} from {self.minimum:g} to {self.maximum:g}"
        if self.minimum is not None:
            return f"{kind} >= {self.minimum:g}"
        if self.maximum is not None:
            return f"{kind} <= {self.maximum:g}"
        return kind

    def check(self, value: Any) -> Any:
        """``value`` if the constraints allow it; ConfigError naming option, value and rule."""
        if self.choices is not None:
            items = [v.strip() for v in value.split(",") if v.strip()] if self.list_of \
                else [value]
            bad = [item for item in items if item not in self.choices]
        else:
            bad = [value] if ((self.minimum is not None and value < self.minimum)
                              or (self.maximum is not None and value > self.maximum)
                              or value != value) else []  # NaN is never inside a range
        if bad:
            shown = value if not self.list_of else ", ".join(bad)
            raise ConfigError(f"[{self.section}] {self.name}: {shown!r} is not allowed; "
                              f"expected {self.allowed()}")
        if self.validate is not None:
            try:
                self.validate(value)
            except ValueError as exc:
                raise ConfigError(f"[{self.section}] {self.name}: {value!r} is not allowed "
                                  f"({exc}); expected {self.allowed()}") from None
        return value


def zone_values(text: str) -> dict[str, float]:
    """``{zone: number}`` of a per-zone option: ``az-a:120, az-b:380`` (empty: none).

    Each comma-separated entry is ``ZONE:NUMBER`` (the last ``:`` splits), the zone not
    empty and named once, the number finite and >= 0. Raises ValueError naming the
    entry that is not.
    """
    values: dict[str, float] = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        zone, colon, number = entry.rpartition(":")
        zone = zone.strip()
        if not colon or not zone:
            raise ValueError(f"entry {entry!r} is not ZONE:NUMBER")
        try:
            value = float(number)
        except ValueError:
            raise ValueError(f"entry {entry!r}: {number.strip()!r} is not a number") from None
        if not 0 <= value < float("inf"):
            raise ValueError(f"entry {entry!r}: the number must be finite and >= 0")
        if zone in values:
            raise ValueError(f"zone {zone!r} is given twice")
        values[zone] = value
    return values


def _default_database_url(environ: Mapping[str, str]) -> str:
    """SQLite file in the user's data directory ($XDG_DATA_HOME/cortex, else ~/.local/share)."""
    base = environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return f"sqlite:///{Path(base) / 'cortex' / 'cortex.sqlite'}"


def _separators(text: str) -> str:
    """``text`` when it is one or more non-blank characters (flavor family separators)."""
    if not text or any(c.isspace() for c in text):
        raise ValueError("give one or more characters, no blanks (e.g. '.' or '.-')")
    return text


OPTIONS: tuple[Option, ...] = (
    Option("DEFAULT", "debug", bool, False, "Log at DEBUG level."),
    Option("DEFAULT", "log_format", str, "text", "Log line format: text or json.",
           choices=("text", "json")),
    Option("api", "host", str, "127.0.0.1", "Address cortex-api (the development server) binds."),
    Option("api", "port", int, 8080, "Port cortex-api binds.",
           minimum=1, maximum=65535),
    Option("api", "max_body_bytes", int, 8 * 1024 * 1024,
           "Largest accepted request body in bytes; larger bodies get 413.",
           minimum=1),
    Option("api", "auth_strategy", str, "static",
           "Authentication of everything but the external scheduler endpoints (decisions, "
           "topology reports, the dashboard): 'static' (tokens below), 'keystone' "
           "(keystonemiddleware, the 'keystone' extra, configured in [keystone_authtoken]) "
           "or 'noauth' (development only).",
           choices=("static", "keystone", "noauth")),
    Option("api", "static_tokens", str, "",
           "For auth_strategy=static: comma-separated NAME:ROLE:TOKEN entries, ROLE one of "
           "admin, reader, agent. Clients send the token as X-Auth-Token (or "
           "Authorization: Bearer). An agent token's NAME is the one host it may report "
           "topology for."),
    Option("api", "keystone_admin_role", str, "admin",
           "For auth_strategy=keystone: the Keystone role that may do everything."),
    Option("api", "keystone_reader_role", str, "reader",
           "For auth_strategy=keystone: the Keystone role that may read decisions and topology."),
    Option("api", "keystone_agent_role", str, "cortex-agent",
           "For auth_strategy=keystone: the Keystone role host agents report topology with; "
           "a user with it reports only for the host named like the user."),
    Option("api", "external_shared_secret", str, "",
           "If set, the external scheduler endpoints require this value in the "
           "X-Cortex-Shared-Secret header (the callers send no token; put a proxy that adds "
           "the header in front, or bind the API to an internal address instead)."),
    Option("api", "public_metrics", bool, False,
           "Serve /metrics without authentication. False: with authentication on, scraping "
           "needs a token of role reader (Prometheus: 'authorization: {credentials: ...}' "
           "or bearer_token_file, sent as X-Auth-Token by a proxy, or Keystone)."),
    Option("api", "export_host_utilization", bool, True,
           "Export cortex_host_utilization_ratio (and its deprecated twin), one series per "
           "host and resource class: at 10,000 hosts some 100,000 lines a scrape; turn it "
           "off for huge fleets (the availability zone series stay)."),
    Option("api", "public_url", str, "",
           "Base URL clients reach the API at (e.g. https://cortex.example.org:8080), used "
           "for the links of GET /. Empty: the links are relative; never taken from the "
           "request's Host header."),
    Option("api", "warm_up", bool, True,
           "gunicorn workers (etc/cortex/gunicorn.conf.py) load the knowledge view and run "
           "a general-purpose and 1, 2, 4 and 8 GPU request as simulations before they "
           "accept connections, so the first calls do not build the view's tables. "
           "Stops at warm_up_timeout; a database that is down is left to the first call."),
    Option("api", "warm_up_timeout", float, 5.0,
           "Seconds after a gunicorn worker's start (its fork) by which its warm-up ends "
           "and it serves: the warm-up asks no request after it, the one under way stops "
           "at its next step, the rest are skipped (their first live calls build what "
           "they need). The start's own work (the app, the knowledge view) counts: on a "
           "loaded machine it may use the whole budget. 0: load the view, ask nothing. At "
           "most 25: gunicorn kills a worker not serving after its timeout (30 s).",
           minimum=0, maximum=25),
    Option("api", "warm_up_shapes", int, 16,
           "How many of the newest request shapes live calls brought (kept in the "
           "database, table request_shapes) a fresh worker also replays as simulations "
           "before it serves, so the first call of a flavor the cloud asks for finds its "
           "step answers kept. 0: none, and no shape is recorded.",
           minimum=0, maximum=200),
    Option("database", "connection", str, "",
           "SQLAlchemy URL, e.g. postgresql+psycopg://cortex:secret@db/cortex. "
           "Empty: an embedded SQLite file in the user's data directory "
           "(single process only)."),
    Option("database", "knowledge_check_interval", float, 1.0,
           "Seconds between checks of the knowledge version; the in-memory view is "
           "rebuilt only when the version changed.",
           minimum=0),
    Option("database", "knowledge_background_reload", bool, True,
           "Check the version and rebuild the view on a background thread of each worker, "
           "answering from the current view meanwhile (false: the request that finds "
           "the check due does it and waits)."),
    Option("database", "max_knowledge_age", float, 300.0,
           "Seconds the API keeps answering from its last knowledge view while the "
           "database cannot be read; older than this, the external endpoints answer 503 "
           "(the callers keep their own order). 0: no limit.",
           minimum=0),
    Option("database", "connect_timeout", int, 2,
           "Seconds to wait for a PostgreSQL connection, kept well under the callers' "
           "5-10 s timeouts (psycopg waits at least 2 s).",
           minimum=1, maximum=60),
    Option("database", "statement_timeout", float, 30.0,
           "Seconds the server lets one statement of the API's connections run before it "
           "cancels it (PostgreSQL statement_timeout). The request path is bounded by "
           "[scheduler] request_time_budget on the client anyway; this catches statements "
           "of the background work (knowledge loads, decision writes). 0: none.",
           minimum=0, maximum=3600),
    Option("database", "lock_timeout", float, 2.0,
           "Seconds a statement of the API's connections may wait for a lock, the "
           "reservations' per-host lock included (PostgreSQL lock_timeout). 0: none.",
           minimum=0, maximum=3600),
    Option("database", "keepalives_idle", int, 5,
           "Seconds of silence before TCP keepalives probe a PostgreSQL connection "
           "(libpq keepalives_idle).",
           minimum=1, maximum=3600),
    Option("database", "keepalives_interval", int, 2,
           "Seconds between unanswered TCP keepalive probes (libpq keepalives_interval).",
           minimum=1, maximum=600),
    Option("database", "keepalives_count", int, 3,
           "Unanswered keepalive probes after which the connection counts as dead (libpq "
           "keepalives_count): a vanished server or link is noticed within idle + "
           "interval * count seconds.",
           minimum=1, maximum=100),
    Option("database", "tcp_user_timeout", float, 10.0,
           "Seconds sent data may stay unacknowledged before the connection counts as dead "
           "(libpq tcp_user_timeout). 0: the operating system's default.",
           minimum=0, maximum=3600),
    Option("database", "check_timeout", float, 2.0,
           "Seconds one knowledge version check (each worker's probe of the database) may "
           "wait for an answer; a check that gets none counts as a failure and the request "
           "path stops waiting for the database until a check succeeds again.",
           minimum=0.1, maximum=60),
    Option("database", "request_timeout", float, 10.0,
           "Seconds one API request may wait for the database in all (decisions, topology, "
           "the dashboard, /metrics); the external scheduler calls wait at most their "
           "request_time_budget, the healthcheck check_timeout. Past it the request "
           "answers 503, so a hung database never holds a request slot for longer.",
           minimum=0.5, maximum=600),
    Option("database", "max_retry_interval", float, 1.0,
           "Longest pause, in seconds, between two knowledge checks while the database "
           "fails (exponential back-off from knowledge_check_interval, with jitter): the "
           "API answers normally again at most this long after the database is back.",
           minimum=0.1, maximum=60),
    Option("scheduler", "request_time_budget", float, 2.0,
           "Seconds one external call may spend in the pipeline and waiting for the "
           "database (the reservation read and promise included); past it the call "
           "answers 503 so the caller keeps its own order, or goes out unpromised (see "
           "promise_failure_policy). 0: no budget for the pipeline; database waits are "
           "then bounded at 5 s.",
           minimum=0),
    Option("scheduler", "promise_failure_policy", str, "answer",
           "What a Nova call does when its in-flight reservation cannot be made (the "
           "database failed or did not answer within the budget): 'answer' sends the "
           "ranking unpromised (logged, counted in "
           "cortex_scheduler_unpromised_answers_total; Placement's claim still decides), "
           "'fail' answers 503 so Nova keeps its own order.",
           choices=("answer", "fail")),
    Option("scheduler", "step_memo_size", int, 1000000,
           "Host answers each API worker keeps per knowledge version for the steps that "
           "declare what of a request they read (the GPU, NUMA, capacity, trait and "
           "tenancy filters, most weighers): a request of a shape seen before asks them "
           "only about hosts not judged yet. A step's table for one request shape holds "
           "room for an answer per host of the fleet (4 bytes a host for a filter, 20 for "
           "a weigher), and counts that much; least recently used tables go first "
           "(counted in cortex_step_answers_dropped_total; cortex_step_answers_kept shows "
           "a worker's count). 0: keep none.",
           minimum=0),
    Option("scheduler", "pipelines_file", str, "",
           "Pipeline definitions (YAML). Empty: the pipelines.yaml shipped with Cortex."),
    Option("scheduler", "unknown_host_policy", str, "keep",
           "Hosts the caller names but Cortex has no knowledge of: 'keep' ranks them by "
           "the caller's weight after the judged hosts, 'drop' removes them.",
           choices=("keep", "drop")),
    Option("scheduler", "decision_queue_size", int, 10000,
           "Decisions waiting to be written; when full, new ones are dropped and counted.",
           minimum=1),
    Option("scheduler", "decision_flush_interval", float, 0.05,
           "Seconds a decision record waits for the next ones before the writer stores "
           "them in one transaction (a record may be stored that much later, and a "
           "worker that crashes loses them). 0: each record as soon as the writer is "
           "free.",
           minimum=0, maximum=10),
    Option("scheduler", "decision_quiet_wait", float, 0.5,
           "Seconds at most the writer holds gathered decision records back while a "
           "scheduling call is in flight in its worker, so that writing them (~2 ms of the "
           "interpreter for a 10,000-host record) falls between the calls, not inside "
           "them; a full batch never waits. 0: never waits.",
           minimum=0, maximum=10),
    Option("scheduler", "decision_retention_days", float, 30.0,
           "Decisions older than this are pruned by 'cortex-manage decisions prune' "
           "and by the writer once an hour.",
           minimum=0),
    Option("scheduler", "reservation_ttl", float, 300.0,
           "Seconds an in-flight reservation (what Cortex just promised a Nova call) counts "
           "as used capacity unless the synced knowledge shows its instance sooner; keep "
           "it above the Nova and Placement sync intervals. 0: no reservations.",
           minimum=0),
    Option("scheduler", "reservation_feed", bool, True,
           "PostgreSQL: each API worker keeps the in-flight reservations in memory, reloaded "
           "when the table announces a change (LISTEN/NOTIFY), instead of reading them on "
           "every Nova call; the promise still re-checks the host against the table."),
    Option("network", "spine_key", str, "topology:spine",
           "Aggregate metadata key naming the spine of the aggregate's hosts."),
    Option("network", "leaf_key", str, "topology:leaf",
           "Aggregate metadata key naming the leaf (top-of-rack switch) of the aggregate's "
           "hosts; an aggregate with it places its hosts before the topology file does."),
    Option("network", "block_key", str, "topology:block",
           "Aggregate metadata key naming the NVLink/NVL block of the aggregate's hosts."),
    Option("network", "uplink_key", str, "topology:uplink_gbps",
           "Aggregate metadata key giving the leaf's uplink bandwidth in Gbit/s."),
    Option("network", "prometheus_query", str, "",
           "PromQL instant query whose series carry each host's network location in their "
           "labels (an LLDP exporter's neighbour metric, a node_exporter textfile metric), "
           "run by the prometheus sync source ([prometheus] url). Aggregates and the "
           "topology file place hosts before it. Empty: this source is off."),
    Option("network", "prometheus_host_label", str, "instance",
           "Label of prometheus_query's series naming the compute host (matched to Nova "
           "hosts like the [prometheus] feature queries: port and domain stripped)."),
    Option("network", "prometheus_leaf_label", str, "leaf",
           "Label of prometheus_query's series naming the host's leaf (top-of-rack switch)."),
    Option("network", "prometheus_spine_label", str, "spine",
           "Label naming the leaf's spine; a series without it is skipped. Empty: spines "
           "are not taken from Prometheus."),
    Option("network", "prometheus_block_label", str, "",
           "Label naming the NVLink/NVL block of the host's leaf (optional per series). "
           "Empty: not used."),
    Option("network", "prometheus_uplink_label", str, "",
           "Label giving the leaf's uplink bandwidth in Gbit/s (optional per series). "
           "Empty: not used."),
    Option("gpu", "pci_alias", str, "",
           "PCI aliases, the same JSON as Nova's [pci] alias (one object, or a list of "
           "objects on one line): name, vendor_id, product_id, device_type, numa_policy. "
           "Resolves a flavor's pci_passthrough:alias when the request spec carries no "
           "pci_requests."),
    Option("gpu", "device_profiles", str, "",
           "Cyborg device profiles as JSON, [{name, groups: [{resources:PGPU: 1, "
           "trait:CUSTOM_GPU_PRODUCT_ID_2330: required}]}], to resolve a flavor's "
           "accel:device_profile."),
    Option("energy", "carbon_intensity", str, "",
           "Carbon intensity of the grid each availability zone draws from, in gCO2/kWh, "
           "as comma-separated ZONE:GRAMS entries (az-a:120, az-b:380; zone 'none' for "
           "hosts without one), for the zone metrics of /metrics. A zone whose hosts "
           "carry the Prometheus feature carbon.intensity_g_per_kwh uses its mean "
           "instead. (weigher_gpu_energy takes its own per pipeline.)",
           validate=zone_values, form="comma-separated ZONE:GRAMS entries, GRAMS >= 0"),
    Option("energy", "default_carbon_intensity", float, 400.0,
           "gCO2/kWh of a zone neither Prometheus nor carbon_intensity knows.", minimum=0),
    Option("energy", "export_hosts", bool, True,
           "Export cortex_host_gpu_power_watts, one series per GPU host; turn it off for "
           "huge fleets (the zone series stay)."),
    Option("sync", "interval", float, 60.0, "Default seconds between syncs of one source.",
           minimum=1),
    Option("sync", "sources", str, "",
           "Comma-separated sources cortex-sync runs, from nova, placement, cinder, manila, "
           "keystone, prometheus, forecast. Empty: the five OpenStack sources, plus "
           "prometheus when [prometheus] url is set.",
           choices=SYNC_SOURCES, list_of=True),
    *(Option("sync", f"{name}_interval", float, 0.0,
             f"Seconds between {name} syncs; 0: [sync] interval.", minimum=0)
      for name in ("nova", "placement", "cinder", "manila", "keystone", "prometheus")),
    Option("sync", "forecast_interval", float, 3600.0,
           "Seconds between two computations of the GPU demand forecasts (the forecast "
           "source; not in the default sources: it needs the forecast extra, statsmodels).",
           minimum=60),
    Option("sync", "jitter", float, 0.1,
           "Each wait is the interval times a random factor in [1 - jitter, 1 + jitter], "
           "so replicas and sources do not hit the APIs in lockstep.",
           minimum=0, maximum=0.9),
    Option("sync", "backoff_initial", float, 5.0,
           "Seconds before the first retry of a failed source; doubled after each "
           "further failure.",
           minimum=0.1),
    Option("sync", "backoff_max", float, 600.0,
           "Longest wait between retries of a failing source.",
           minimum=1),
    Option("sync", "batch_size", int, 1000, "Rows per INSERT ... ON CONFLICT statement.",
           minimum=1, maximum=10000),
    Option("sync", "concurrency", int, 8,
           "Parallel per-provider Placement requests (inventories, usages, traits, aggregates).",
           minimum=1, maximum=64),
    Option("sync", "placement_processes", int, 1,
           "Processes that divide a large Placement read (the first run, a full read: "
           "three calls per provider), each with its own connection and [sync] concurrency "
           "calls in flight, at least 500 providers each. One process spends 1.2-1.8 ms "
           "of CPU per call under one interpreter lock, about 600 calls a second however "
           "many are in flight; on a sync host with free cores, more processes divide "
           "that. 1: this process only.",
           minimum=1, maximum=64),
    Option("sync", "full_sync_interval", float, 3600.0,
           "Seconds between full reads of what the nova and placement sources otherwise "
           "read as changes: servers (Nova's changes-since) and provider usages (providers "
           "whose generation moved or whose node's servers or migrations changed). A full "
           "read also catches what the changes miss (servers archived before a run saw "
           "them deleted, allocations of non-Nova consumers). 0: every run reads all.",
           minimum=0),
    Option("sync", "changes_since_overlap", float, 300.0,
           "Seconds the changes-since time of a run reaches back before the previous run "
           "began (by Nova's clock, the Date header of its answer): room for clock skew "
           "between Nova's API and database hosts and for transactions still open then.",
           minimum=0, maximum=86400),
    Option("sync", "metrics_host", str, "127.0.0.1", "Address of cortex-sync's /metrics server."),
    Option("sync", "metrics_port", int, 9322, "Port of cortex-sync's /metrics server; 0: none.",
           minimum=0, maximum=65535),
    Option("descheduler", "detectors_file", str, "",
           "The detectors cortex-descheduler runs, with their options (YAML). Empty: the "
           "descheduler.yaml shipped with Cortex."),
    Option("descheduler", "dry_run", bool, True,
           "Plan and record the moves without asking Nova to make them; --execute or "
           "--dry-run on the command line override it."),
    Option("descheduler", "interval", float, 300.0, "Seconds between two descheduler runs.",
           minimum=1),
    Option("descheduler", "max_moves_per_run", int, 2,
           "Moves one run may plan (made or proposed), counting the moves of earlier runs "
           "Nova is still making.", minimum=1, maximum=1000),
    Option("descheduler", "max_moves_per_host", int, 1,
           "Moves of one run a host may take part in, as source or target, counting the "
           "moves of earlier runs Nova is still making.", minimum=1, maximum=100),
    Option("descheduler", "cooldown", float, 86400.0,
           "Seconds after a move asked of Nova (whether it completed, failed or timed out) "
           "during which its instance is not moved again.", minimum=0),
    Option("descheduler", "move_timeout", float, 1800.0,
           "Seconds a move may take before it is recorded as timed out; the next pass asks "
           "Nova where it stands.", minimum=1),
    Option("descheduler", "poll_interval", float, 5.0,
           "Seconds between two looks at a moving instance.", minimum=0.01),
    Option("descheduler", "cold_migrate_passthrough", bool, False,
           "Cold-migrate instances that hold passthrough GPUs (they cannot live-migrate); "
           "off: such moves are only proposed."),
    Option("descheduler", "live_migrate_vgpu", bool, True,
           "Live-migrate instances with vGPUs (mdevs; Nova 2024.1 and later); off: "
           "such moves are only proposed."),
    Option("descheduler", "record_decisions", bool, True,
           "Record the decision that chose each move's target (outcome simulated)."),
    Option("descheduler", "metrics_host", str, "127.0.0.1",
           "Address of cortex-descheduler's /metrics server."),
    Option("descheduler", "metrics_port", int, 9323,
           "Port of cortex-descheduler's /metrics server; 0: none.", minimum=0,
           maximum=65535),
    Option("kubernetes", "nodes_from_reports", bool, False,
           "Hosts whose cortex-agent reports but that Nova does not know are Kubernetes "
           "nodes the extender (/scheduler/kubernetes/...) can place pods on; off: their "
           "reports stay out of the knowledge."),
    Option("kubernetes", "api_url", str, "",
           "The Kubernetes API server the extender binds pods through (its bind verb), e.g. "
           "https://kubernetes.default.svc. Empty: bind answers an error."),
    Option("kubernetes", "token_file", str, "",
           "A file holding the bearer token for the API server (a service account's "
           "token, /var/run/secrets/kubernetes.io/serviceaccount/token in a pod)."),
    Option("kubernetes", "ca_file", str, "",
           "CA bundle that signs the API server's certificate; empty: the system's."),
    Option("kubernetes", "timeout", float, 5.0,
           "Seconds to wait for one API server call.", minimum=0.1),
    Option("forecast", "horizon_days", float, 14.0,
           "Days the GPU demand forecasts look ahead (cortex-sync's forecast source; "
           "cortex-manage forecast --horizon overrides it).", minimum=1, maximum=90),
    Option("forecast", "history_days", float, 90.0,
           "Days of recorded GPU demand a forecast is fitted on.", minimum=1, maximum=730),
    Option("forecast", "coverage", float, 0.8,
           "Probability of the forecasts' prediction intervals (0.8: the 10th to the 90th "
           "percentile).", minimum=0.5, maximum=0.99),
    Option("forecast", "flavor_family_separators", str, ".",
           "Characters that end a flavor family's name: with '.', g5.2xlarge is family g5. "
           "Each family gets a forecast of its GPU demand.", validate=_separators,
           form="one or more characters, no blanks"),
    Option("forecast", "demand_retention_days", float, 400.0,
           "GPU demand rows (one per GPU create decided) older than this are pruned by the "
           "decision writer; keep it above history_days.", minimum=1),
    Option("prometheus", "url", str, "", "Prometheus HTTP API base URL for live load."),
    Option("prometheus", "queries_file", str, "",
           "PromQL queries mapped to host features (YAML). Empty: the "
           "prometheus-queries.yaml shipped with Cortex (DCGM, node_exporter, libvirt)."),
    Option("prometheus", "timeout", float, 30.0, "Seconds to wait for one Prometheus query.",
           minimum=0.1),
    Option("prometheus", "retention_hours", float, 24.0,
           "Range-query samples older than this are deleted by each prometheus sync.",
           minimum=0.01),
    Option("prometheus", "staleness_seconds", float, 300.0,
           "A series whose newest sample is older than this is ignored by the host features.",
           minimum=1),
    Option("openstack", "cloud", str, "",
           "Cloud name in clouds.yaml (openstacksdk). Empty: the OS_* environment "
           "variables, or the credentials below when auth_url is set."),
    Option("openstack", "region_name", str, "", "Region to sync."),
    Option("openstack", "interface", str, "", "Endpoint interface: public, internal, admin. "
           "Empty: openstacksdk's default.",
           choices=("", "public", "internal", "admin")),
    Option("openstack", "auth_url", str, "",
           "Keystone v3 URL for password authentication (instead of clouds.yaml / OS_*)."),
    Option("openstack", "username", str, "", "User for password authentication."),
    Option("openstack", "password", str, "", "Password for password authentication."),
    Option("openstack", "project_name", str, "", "Project to scope the token to."),
    Option("openstack", "user_domain_name", str, "Default", "Domain of the user."),
    Option("openstack", "project_domain_name", str, "Default", "Domain of the project."),
    Option("openstack", "cacert", str, "", "CA bundle to verify the endpoints with."),
)


_DECLARED: dict[tuple[str, str], Option] = {(o.section, o.name): o for o in OPTIONS}


def shipped_file(name: str) -> Path:
    """A file Cortex ships in ``etc/cortex/``: from the checkout, else the installed copy.

    Wheels install ``etc/cortex/*`` as data files under ``<prefix>/share/cortex``.
    Raises ConfigError when neither exists.
    """
    candidates = (Path(__file__).resolve().parents[1] / "etc" / "cortex" / name,
                  Path(sys.prefix) / "share" / "cortex" / name)
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise ConfigError(f"shipped file {name} not found in {', '.join(map(str, candidates))}")


def _parse(option: Option, raw: str) -> Any:
    """Turn the text of ``option`` into its type and check its constraints.

    Raises ConfigError naming the section, the option, the value and what is allowed.
    """
    try:
        if option.type is bool:
            lowered = raw.strip().lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        value = option.type(raw.strip())
    except ValueError:
        raise ConfigError(
            f"[{option.section}] {option.name}: {raw!r} is not a valid "
            f"{option.type.__name__}") from None
    return option.check(value)


class Config:
    """Resolved configuration, read-only: ``conf.get("database", "connection")``.

    Build with :func:`load`. Holds only values, so tests construct it with
    ``load(overrides={...})`` instead of touching the environment.
    """

    def __init__(self, values: dict[tuple[str, str], Any], source: str | None,
                 default_database_url: str = "",
                 passthrough: dict[str, dict[str, str]] | None = None) -> None:
        self._values = values
        self.source = source
        self._default_database_url = default_database_url
        self._passthrough = passthrough or {}

    def section(self, name: str) -> dict[str, str]:
        """The raw options of a passthrough section (e.g. ``keystone_authtoken``)."""
        return dict(self._passthrough.get(name, {}))

    def get(self, section: str, name: str) -> Any:
        """The value of ``[section] name``; KeyError for an undeclared option."""
        return self._values[(section, name)]

    @property
    def database_url(self) -> str:
        """The database URL, with the embedded SQLite default filled in."""
        return self.get("database", "connection") or self._default_database_url

    def with_overrides(self, overrides: dict[str, Any]) -> Config:
        """A copy with ``{"section.name": value}`` replaced (typed values, checked).

        A value given as text is parsed as the file's would be; a value of another type
        than the option's (an int stands for a float) raises ConfigError.
        """
        values = dict(self._values)
        for key, value in overrides.items():
            section, name = key.split(".", 1)
            if (section, name) not in values:
                raise ConfigError(f"unknown option [{section}] {name}")
            option = _DECLARED[(section, name)]
            if isinstance(value, str) and option.type is not str:
                values[(section, name)] = _parse(option, value)
                continue
            wanted = (int, float) if option.type is float else option.type
            if not isinstance(value, wanted) or (option.type is not bool
                                                 and isinstance(value, bool)):
                raise ConfigError(f"[{section}] {name}: {value!r} is not a valid "
                                  f"{option.type.__name__}")
            values[(section, name)] = option.check(value)
        return Config(values, self.source, self._default_database_url, self._passthrough)


def load(path: str | None = None, environ: dict[str, str] | None = None,
         overrides: dict[str, Any] | None = None) -> Config:
    """Read ``path`` (else ``$CORTEX_CONFIG_FILE``, else nothing) and the environment.

    Raises ConfigError for a missing file, an unknown section/option in the file or
    ``CORTEX_*`` variable in ``environ`` (a typo must not be silently ignored; the
    message offers the nearest names) or a value of the wrong type.
    """
    environ = os.environ if environ is None else environ
    _reject_unknown_variables(environ)
    path = path or environ.get(CONFIG_FILE_ENV) or None
    parser = configparser.ConfigParser(interpolation=None)
    if path:
        if not Path(path).is_file():
            raise ConfigError(f"config file {path} does not exist")
        parser.read(path)
    known = _DECLARED
    _reject_unknown(parser, known)
    values: dict[tuple[str, str], Any] = {}
    for key, option in known.items():
        raw = environ.get(env_name(option))
        if raw is None and parser.has_option(option.section, option.name):
            raw = parser.get(option.section, option.name)
        values[key] = option.default if raw is None else _parse(option, raw)
    passthrough = {s: {k: v for k, v in parser.items(s) if k not in parser.defaults()}
                   for s in PASSTHROUGH_SECTIONS if parser.has_section(s)}
    conf = Config(values, path, _default_database_url(environ), passthrough)
    return conf.with_overrides(overrides) if overrides else conf


def env_name(option: Option) -> str:
    """The environment variable that overrides ``option``: ``CORTEX_<SECTION>_<OPTION>``."""
    return f"CORTEX_{option.section.upper()}_{option.name.upper()}"


def _did_you_mean(word: str, candidates: list[str], prefix: str = "") -> str:
    """`` (did you mean X?)`` with up to three close candidates, else the empty string.

    ``prefix``, shared by ``word`` and every candidate, is left out of the comparison
    (it would make every name look near).
    """
    near = difflib.get_close_matches(word.removeprefix(prefix),
                                     [c.removeprefix(prefix) for c in candidates], n=3)
    return f" (did you mean {' or '.join(prefix + n for n in near)}?)" if near else ""


def _reject_unknown_variables(environ: Mapping[str, str]) -> None:
    """Raise ConfigError for a ``CORTEX_*`` variable that names no option nor other use."""
    known = {env_name(o) for o in OPTIONS} | set(OTHER_VARIABLES)
    for name in sorted(environ):
        if (name.startswith("CORTEX_") and name not in known
                and not name.startswith(OTHER_PREFIXES)):
            raise ConfigError(f"unknown environment variable {name}"
                              + _did_you_mean(name, sorted(known), prefix="CORTEX_"))


def _reject_unknown(parser: configparser.ConfigParser, known: dict) -> None:
    """Raise ConfigError for any section or option in the file that is not declared."""
    sections = sorted({s for s, _ in known})
    for name in parser.defaults():
        if ("DEFAULT", name) not in known:
            raise ConfigError(f"unknown option [DEFAULT] {name}" + _did_you_mean(
                name, [n for s, n in known if s == "DEFAULT"]))
    for section in parser.sections():
        if section in PASSTHROUGH_SECTIONS:
            continue
        if section not in sections:
            raise ConfigError(f"unknown section [{section}]"
                              + _did_you_mean(section, sections + list(PASSTHROUGH_SECTIONS)))
        for name in parser.options(section):
            if (section, name) not in known and name not in parser.defaults():
                raise ConfigError(f"unknown option [{section}] {name}" + _did_you_mean(
                    name, [n for s, n in known if s == section]))


def sample() -> str:
    """The text of ``cortex.conf.sample``: every option commented out with its help."""
    lines = ["# Cortex configuration. Generated by 'cortex-manage config sample'.",
             "# Any option can be overridden by the environment as CORTEX_<SECTION>_<OPTION>."]
    section = None
    for option in OPTIONS:
        if option.section != section:
            section = option.section
            lines += ["", f"[{section}]"]
        default = str(option.default).lower() if option.type is bool else option.default
        lines += ["", f"# {option.help} ({option.allowed()})", f"#{option.name} = {default}"]
    return "\n".join(lines) + "\n"
