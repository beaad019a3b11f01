"""Fixtures of the Nova loop: one Nova, one Cortex and one database for the whole package.

Starting Nova's control plane costs a few seconds and Cortex's gunicorn a few more, so
both live as long as the package's tests; each test leaves the fleet empty again
(:func:`loop`'s teardown deletes its servers, clears the in-flight reservations and
syncs), so the tests do not depend on their order.
"""

from __future__ import annotations

import os
import re
import time
import uuid

import pytest
from sqlalchemy import text

from cortex import conf as config
from cortex.db import migrate
from cortex.db.engine import make_engine
from cortex.store import reservation_feed
from cortex.sync.runner import run_source
from cortex.sync.sources import build_sources
from tests.conftest import _create_postgres_database, _drop_postgres_database
from tests.differential.nova_venv import NovaUnavailable, nova_functional_venv
from tests.fakes import nova_body
from tests.nova_loop import fleet
from tests.nova_loop.harness import (
    CLOUD,
    CortexServer,
    LoopError,
    NovaProcess,
    clouds_yaml,
    http,
)


@pytest.fixture(scope="package")
def loop_database():
    """A migrated PostgreSQL database holding nothing: cortex-sync fills it from Nova."""
    url = _create_postgres_database("novaloop")
    engine = make_engine(url)
    migrate.upgrade(engine)
    engine.dispose()
    yield url
    reservation_feed.stop_all()
    _drop_postgres_database(url)


@pytest.fixture(scope="package")
def loop_engine(loop_database):
    engine = make_engine(loop_database)
    yield engine
    engine.dispose()


@pytest.fixture(scope="package")
def cortex(loop_database, tmp_path_factory):
    """Cortex (gunicorn, one worker) on the loop's database."""
    server = CortexServer(loop_database, tmp_path_factory.mktemp("cortex"))
    yield server
    server.stop()


@pytest.fixture(scope="package")
def nova(cortex, tmp_path_factory):
    """Nova 34's control plane with the fleet's hosts, its hook calling ``cortex``."""
    try:
        python = nova_functional_venv() / "bin" / "python"
    except NovaUnavailable as exc:
        pytest.fail(str(exc))
    process = NovaProcess(python, tmp_path_factory.mktemp("nova"), cortex.url)
    yield process
    process.stop()


@pytest.fixture(scope="package")
def clouds(nova, tmp_path_factory):
    """``OS_CLIENT_CONFIG_FILE`` naming the harness's Nova and Placement (cloud ``nova-loop``)."""
    path = clouds_yaml(tmp_path_factory.mktemp("clouds") / "clouds.yaml", nova)
    previous = os.environ.get("OS_CLIENT_CONFIG_FILE")
    os.environ["OS_CLIENT_CONFIG_FILE"] = str(path)
    yield path
    if previous is None:
        os.environ.pop("OS_CLIENT_CONFIG_FILE", None)
    else:
        os.environ["OS_CLIENT_CONFIG_FILE"] = previous


class World:
    """The running loop: Nova (driver commands), Cortex and the sync."""

    def __init__(self, nova: NovaProcess, cortex: CortexServer, engine, conf) -> None:
        self.nova = nova
        self.cortex = cortex
        self.engine = engine
        self.conf = conf
        self.sources = build_sources(conf, ("nova", "placement"))
        self.flavors: dict[str, str] = {}

    # -- knowledge
    def sync(self) -> None:
        """cortex-sync's nova and placement sources, once each (in this process)."""
        for source in self.sources:
            result = run_source(self.engine, source)
            assert result.ok, result.error

    def report(self, host: str, healthy: bool = True) -> None:
        """Post ``host``'s agent report with what its guests use now."""
        self.cortex.report(host, fleet.report(host, self.nova.call("usage", host=host),
                                              healthy=healthy))

    def refresh(self) -> None:
        """Sync, post every GPU host's report, and wait until Cortex answers from them."""
        self.sync()
        for host in fleet.GPU_HOSTS:
            self.report(host)
        self.settle()

    def settle(self) -> None:
        """Wait until Cortex's worker answers from the stored knowledge version."""
        with self.engine.connect() as connection:
            version = connection.execute(text("SELECT version FROM knowledge_version")).scalar()
        self.cortex.wait_for_version(version)

    # -- Nova
    def flavor(self, name: str, vcpus: int, ram: int, **extra_specs) -> str:
        """A flavor (created once per name); its id."""
        if name not in self.flavors:
            self.flavors[name] = self.nova.call(
                "flavor", name=name, vcpus=vcpus, ram=ram,
                extra_specs={k.replace("__", ":"): v for k, v in extra_specs.items()})["id"]
        return self.flavors[name]

    def boot(self, flavor: str, expect: str = "ACTIVE", **args) -> list[dict]:
        """Servers created through Nova's API, in ``expect`` state.

        A failure says why Cortex removed hosts in the calls it answered last.
        """
        try:
            return self.nova.call("boot", flavor=flavor, expect=expect, **args)["servers"]
        except LoopError as exc:
            raise LoopError(f"{exc}\n{self.explain()}") from None

    def move(self, command: str, **args) -> dict:
        """The server after a move command (``resize``, ``migrate``, ``live_migrate``,
        ``evacuate``, ``rebuild``). A failure says what Cortex removed in its last calls
        and what Nova's computes and Placement held on every GPU host at that moment.
        """
        try:
            return self.nova.call(command, **args)
        except LoopError as exc:
            raise LoopError(f"{exc}\n{self.explain()}") from None

    def explain(self) -> str:
        """What a failed flow needs to be understood: what Cortex removed in its last
        calls and holds (reservations, GPUs), the computes' services, what each GPU host
        held in Nova and Placement, and the scheduler's and conductor's last words. Each
        part that cannot be read says why instead."""
        def gpus(host):
            return [(g["pci_address"], g.get("in_use"), g.get("in_use_source"),
                     (g.get("health") or {}).get("healthy"))
                    for g in self.cortex.get(f"/v1/topology/{host}").get("gpus", [])]

        def rows():
            with self.engine.connect() as connection:
                return [tuple(r) for r in connection.execute(text(
                    "SELECT host, instance_uuid, group_id, resources, gpus, expires_at"
                    " FROM inflight_reservations"))]

        def held():
            roots = self.nova.call("state")["providers"]
            return {host: {"usage": self.nova.call("usage", host=host),
                           "placement": self.placement_usages(roots[host])}
                    for host in fleet.GPU_HOSTS}

        def words():
            return "\n".join(line for line in self.nova.call("log", lines=400)["log"]
                             if any(k in line for k in ("Filter", "NoValidHost", "down",
                                                        "Failed", "ERROR", "retries")))

        def stored():
            with self.engine.connect() as connection:
                version = connection.execute(text(
                    "SELECT version FROM knowledge_version")).scalar()
                pci = connection.execute(text(
                    "SELECT p.name, i.total, i.reserved, i.used FROM provider_inventories i"
                    " JOIN resource_providers p ON p.uuid = i.provider_uuid"
                    " WHERE i.resource_class LIKE 'CUSTOM_PCI_%' AND (i.used > 0"
                    " OR i.reserved > 0) ORDER BY p.name")).all()
            return {"version": version, "worker version": self.cortex.knowledge_version(),
                    "PCI providers used or reserved": [tuple(r) for r in pci]}

        def explanation():
            last = [c for c in self.calls() if c.get("decision_id")][-1]
            return str(self.cortex.get(f"/v1/decisions/{last['decision_id']}/explanation"))[:4000]

        def worker_gpus():
            status, page = http("GET", f"{self.cortex.url}/ui/gpus/panel")
            text = page if isinstance(page, str) else str(page)
            rows = {host: re.findall(r'class="gpu ([^"]*)" title="([^"]*)"', row)
                    for host, row in re.findall(r'id="gpus-([^"]+)"(.*?)</tr>', text, re.S)}
            return rows or (status, text[:300])

        parts = {"Cortex's removals": self.removals,
                 "the worker's GPUs (dashboard)": worker_gpus,
                 "Cortex's explanation of its last call": explanation,
                 "Cortex's stored knowledge": stored,
                 "Cortex's reservations": self.cortex.reservations,
                 "reservation rows": rows,
                 "Cortex's GPUs": lambda: {host: gpus(host) for host in fleet.GPU_HOSTS},
                 "services": lambda: self.nova.call("services")["services"],
                 "GPU hosts": held, "Nova's log": words}
        told = []
        for name, read in parts.items():
            try:
                told.append(f"{name}: {read()}")
            except Exception as exc:  # noqa: BLE001 - a diagnosis never hides the failure
                told.append(f"{name}: unreadable ({type(exc).__name__}: {exc})")
        return "\n".join(told)

    def placement_usages(self, root: str) -> dict[str, dict[str, int]]:
        """Placement's usages of every provider in ``root``'s tree that has some."""
        tree = self.nova.placement(f"/resource_providers?in_tree={root}")["resource_providers"]
        usages = {p["name"]: self.nova.placement(
            f"/resource_providers/{p['uuid']}/usages")["usages"] for p in tree}
        return {name: {rc: n for rc, n in used.items() if n}
                for name, used in usages.items() if any(used.values())}

    def removals(self, last: int = 3) -> list[dict]:
        """The hosts each of the last hook calls' decisions removed, and why."""
        found = []
        for call in self.calls()[-last:]:
            if call.get("decision_id"):
                steps = self.cortex.decision(call["decision_id"])["steps"]
                found.append({s["name"]: s["removed"] for s in steps if s.get("removed")})
        return found

    def calls(self, since: int = 0) -> list[dict]:
        """The hook's calls from index ``since``."""
        return self.nova.call("hook_calls", since=since)["calls"]

    def mark(self) -> int:
        """The number of hook calls so far (pass it to :meth:`calls`)."""
        return self.nova.call("hook_calls", since=0)["count"]

    def allocation(self, consumer: str) -> dict[str, dict[str, int]]:
        """Placement's allocation of a consumer: ``{provider uuid: {class: amount}}``."""
        body = self.nova.placement(f"/allocations/{consumer}")["allocations"]
        return {rp: dict(a["resources"]) for rp, a in body.items()}

    # -- cleanup
    def clean(self) -> None:
        """Delete every server and Cortex's promises, undo injections, sync again."""
        servers = self.nova.call("servers")["servers"]
        if servers:
            self.nova.call("delete", servers=servers)
        self.nova.call("free_races")
        for host in (*fleet.HOSTS, "*"):
            self.nova.call("fail_claims", host=host, count=0)
        with self.engine.begin() as connection:  # see docs/nova-in-the-loop.md
            connection.execute(text("DELETE FROM inflight_reservations"))
        self.refresh()
        self.assert_fleet_empty()

    def assert_fleet_empty(self) -> None:
        """Cortex, asked (simulated, nothing promised) about a 1x H100 guest on both H100
        hosts of the emptied fleet, keeps both: a test that left Cortex believing a GPU
        taken fails here, at its own teardown, with what Cortex holds."""
        status, answer = http("POST", f"{self.cortex.url}/v1/scheduler/nova/simulate",
                              probe_body(list(H100_HOSTS)))
        if status != 200 or sorted(answer["hosts"]) != list(H100_HOSTS):
            removed = [(s["name"], s.get("removed")) for s in answer.get("steps", ())
                       if s.get("removed")] if isinstance(answer, dict) else answer
            raise LoopError(f"the emptied fleet is not empty to Cortex: {status} {removed}\n"
                            f"{self.explain()}")


#: The H100 hosts of the fleet, in name order.
H100_HOSTS = ("cmp-h100-1", "cmp-h100-2")


def probe_body(hosts: list[str]) -> dict:
    """A Nova 34 body for one 1x H100 guest (2 pinned vCPUs, 2 GiB of 1 GiB pages, the
    alias's ``required`` NUMA policy: ``H100X1`` of the tests) offering ``hosts``; made
    from the bundled 2x H100 body."""
    body = nova_body("gpu-2xh100-pinned", hosts=hosts,
                     spec={"instance_uuid": str(uuid.uuid4()), "num_instances": 1,
                           "availability_zone": None})
    data = body["spec"]["nova_object.data"]
    flavor = data["flavor"]["nova_object.data"]
    flavor.update(vcpus=2, memory_mb=2048, root_gb=10)
    flavor["extra_specs"]["pci_passthrough:alias"] = "h100:1"
    cell = data["numa_topology"]["nova_object.data"]["cells"][0]["nova_object.data"]
    cell.update(pcpuset=[0, 1], memory=2048)
    data["pci_requests"]["nova_object.data"]["requests"][0]["nova_object.data"]["count"] = 1
    return body


@pytest.fixture(scope="package")
def world(nova, cortex, clouds, loop_database, loop_engine):
    """The loop with Cortex's knowledge synced from Nova and the GPU hosts reported."""
    conf = config.load(environ={}, overrides={
        "database.connection": loop_database, "openstack.cloud": CLOUD,
        "sync.sources": "nova,placement"})
    started = time.monotonic()
    loop = World(nova, cortex, loop_engine, conf)
    loop.refresh()
    loop.first_sync_seconds = time.monotonic() - started
    loop.assert_fleet_empty()
    return loop


@pytest.fixture
def loop(world):
    """The loop for one test; the fleet empty again afterwards."""
    mark = world.mark()
    yield world
    try:
        fallbacks = [c for c in world.calls(mark) if c["fallback"]]
    finally:
        world.clean()
    if fallbacks:
        raise LoopError(f"Nova fell back to its own order: {fallbacks}")
