"""Full sync of a large fake cloud: wall time per source and peak memory of the sync process.

The cloud (default: 10,000 compute hosts, 200,000 servers, 30,000 resource
providers = each host's root plus two PCI GPU children) is served by the fake
Keystone/Nova/Placement of ``tests/fake_openstack.py`` in a separate process,
through a real openstacksdk connection; the sync writes into a scratch
PostgreSQL database that is dropped afterwards. Run from the checkout:

    .venv/bin/python bench/sync_scale.py [--hosts N --servers N --gpus-per-host N]
        [--concurrency N --placement-processes N --no-floor]

It prints one line per source and run (the first run writes everything, the
second finds nothing changed, the third follows 0.1 % of the servers deleted and
as many booted) with the API calls each run made, and the sync process's peak
resident memory, then the floor of the first run's Placement calls (:func:`http_floor`).
The CPU columns are the sync process's own (its reading processes' are not counted)
and the fake cloud's serving process's.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import requests  # noqa: E402
from sqlalchemy import text  # noqa: E402

from cortex import conf as config  # noqa: E402
from cortex.db import migrate  # noqa: E402
from cortex.db.engine import make_engine  # noqa: E402
from cortex.sync.runner import run_source  # noqa: E402
from cortex.sync.sources import build_sources  # noqa: E402

SERVER = "postgresql+psycopg://postgres@127.0.0.1:5432"


def build_cloud(hosts: int, servers: int, gpus: int):
    """A FakeCloud of the given size; nested server fields are shared, not copied."""
    from tests.fake_openstack import _SERVER_TEMPLATE, FakeCloud

    cloud = FakeCloud()
    flavor = {"vcpus": 16, "ram": 65536, "disk": 100, "ephemeral": 0, "swap": 0,
              "original_name": "g1.h100.16c64g", "extra_specs": {"hw:cpu_policy": "dedicated",
                                                                 "pci_passthrough:alias": "h100:1"}}
    for i in range(hosts):
        host, node = f"cmp{i:05d}", f"cmp{i:05d}.cloud.example"
        root = cloud.add_compute_host(host, node, zone=f"az-{i % 3 + 1}",
                                      host_ip=f"10.{i // 65536}.{i // 256 % 256}.{i % 256}")
        cloud.add_provider(root, node, root, None, {
            "VCPU": (128, 4.0, 40), "PCPU": (96, 1.0, 32), "MEMORY_MB": (1048576, 1.0, 262144),
            "DISK_GB": (3576, 1.0, 400)}, ["COMPUTE_NODE", "HW_ARCH_X86_64"])
        for g in range(gpus):
            child = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node}_{g}"))
            cloud.add_provider(child, f"{node}_0000:{g + 16:02x}:00.0", root, root, {
                "CUSTOM_PCI_10DE_2330": (1, 1.0, g % 2)}, ["CUSTOM_NVIDIA_H100_SXM5"])
    for i in range(servers):
        host = f"cmp{i % hosts:05d}"
        cloud.servers.append(dict(
            _SERVER_TEMPLATE, id=str(uuid.UUID(int=i + 1)), name=f"vm-{i}",
            **{"OS-EXT-SRV-ATTR:host": host,
               "OS-EXT-SRV-ATTR:hypervisor_hostname": f"{host}.cloud.example",
               "tenant_id": f"project-{i % 500}"}, flavor=flavor))
    return cloud


def serve(hosts: int, servers: int, gpus: int, ready) -> None:
    """Child process: build the cloud and serve it with gunicorn (threads, keep-alive).

    werkzeug's development server closes every connection, which would make the
    fake, not the sync, the bottleneck of 30,000 x 4 Placement calls.
    """
    from gunicorn.app.base import BaseApplication

    from tests.fake_openstack import FakeOpenStack
    from tests.real_servers import free_port

    cloud = build_cloud(hosts, servers, gpus)
    port = free_port()
    fake = FakeOpenStack(cloud)  # not started: its app is served by gunicorn below
    fake.url = f"http://127.0.0.1:{port}"
    add_bench_routes(fake)

    class Server(BaseApplication):
        def load_config(self):
            for key, value in {"bind": f"127.0.0.1:{port}", "workers": 1, "threads": 8,
                               "worker_class": "gthread", "keepalive": 30,
                               "loglevel": "warning", "timeout": 300}.items():
                self.cfg.set(key, value)

        def load(self):
            ready.put((fake.url, len(cloud.providers)))
            return fake.app

    Server().run()


def add_bench_routes(fake) -> None:
    """``POST /bench/churn?servers=N``: N servers deleted and N booted as Nova and
    Placement would record them; ``GET /bench/calls``: requests served so far."""
    from flask import jsonify, request

    from tests.fake_openstack import now_iso

    cloud = fake.cloud
    roots = {p["name"]: p for p in cloud.providers if p["parent_provider_uuid"] is None}
    counter = iter(range(10**9))

    @fake.app.post("/bench/churn")
    def churn():
        count = int(request.args["servers"])
        for _ in range(count):
            gone = cloud.delete_server(cloud.servers[0]["id"])
            # Placement frees the allocation and moves no generation
            usages = roots[gone["OS-EXT-SRV-ATTR:hypervisor_hostname"]]["usages"]
            usages["PCPU"] = max(0, usages["PCPU"] - 16)
            number = next(counter)
            host = cloud.servers[number * 7919 % len(cloud.servers)]  # spread over hosts
            new = dict(host, id=str(uuid.UUID(int=10**12 + number)), updated=now_iso(),
                       created=now_iso())
            cloud.servers.append(new)
            # Placement writes the allocation and moves the generation
            root = roots[new["OS-EXT-SRV-ATTR:hypervisor_hostname"]]
            root["usages"]["PCPU"] += 16
            root["generation"] += 1
        return jsonify(deleted=count, booted=count)

    @fake.app.get("/bench/calls")
    def calls():
        # the serving process's CPU seconds (all its threads), for the runs' CPU shares
        return jsonify(calls=len(fake.requests), cpu=time.process_time())


class ChildMemory(threading.Thread):
    """Samples the resident memory of ``parent``'s child processes (but ``skip``).

    The reading processes are spawned (fork, then exec), and a child's ``ru_maxrss``
    keeps what it held between the two, its parent's size; ``/proc``'s ``VmRSS`` does not.
    """

    interval = 0.5

    def __init__(self, parent: int, skip: int) -> None:
        super().__init__(daemon=True)
        self.parent, self.skip, self.peak_mib = parent, skip, 0.0
        self._stop_event = threading.Event()
        self.start()

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit() or int(entry.name) == self.skip:
                    continue
                try:
                    status = (entry / "status").read_text()
                except OSError:
                    continue
                fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
                if int(fields.get("PPid", "0").strip() or 0) == self.parent and "VmRSS" in fields:
                    rss = int(fields["VmRSS"].split()[0]) / 1024
                    self.peak_mib = max(self.peak_mib, rss)

    def stop(self) -> None:
        self._stop_event.set()


def http_floor(url: str, concurrency: int) -> None:
    """Print the floor of a first Placement read: its per-provider GETs and nothing else.

    The first run reads each provider's usages, inventories and aggregates (traits come
    in bulk). Here the same GETs go out through ``requests`` alone (a keep-alive session
    per thread, ``concurrency`` threads, no keystoneauth or openstacksdk, the answers
    decoded and dropped): the fastest a client in Python makes them against this fake,
    with the CPU each side spent.
    """
    listed = requests.get(f"{url}/placement/resource_providers", timeout=60).json()
    paths = [f"{url}/placement/resource_providers/{p['uuid']}/{what}"
             for p in listed["resource_providers"]
             for what in ("usages", "inventories", "aggregates")]
    local = threading.local()

    def get(path: str) -> None:
        session = getattr(local, "session", None)
        if session is None:
            session = local.session = requests.Session()
        session.get(path, headers={"OpenStack-API-Version": "placement 1.39"}, timeout=60).json()

    before = requests.get(f"{url}/bench/calls", timeout=60).json()["cpu"]
    cpu, started = time.process_time(), time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        for _ in pool.map(get, paths):
            pass
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    served = requests.get(f"{url}/bench/calls", timeout=60).json()["cpu"] - before
    print(f"floor     placement {wall:7.1f} s  {len(paths)} GETs by requests alone, "
          f"{concurrency} threads  CPU: client {cpu:.1f} s, fake cloud {served:.1f} s "
          f"({1000 * cpu / len(paths):.2f} and {1000 * served / len(paths):.2f} ms a call)")


def scratch_database() -> str:
    """Create ``cortex_bench_<pid>`` and migrate it; its URL."""
    name = f"cortex_bench_{os.getpid()}"
    admin = make_engine(f"{SERVER}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        c.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    url = f"{SERVER}/{name}"
    engine = make_engine(url)
    migrate.upgrade(engine)
    engine.dispose()
    return url


def drop_database(url: str) -> None:
    admin = make_engine(f"{SERVER}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)'))
    admin.dispose()


def describe(engine, source: str) -> str:
    """What the run read, from its sync_status detail."""
    from cortex.sync.status import previous_detail

    with engine.connect() as connection:
        detail = previous_detail(connection, source)
    keys = ("servers_changed", "servers_deleted", "providers_refreshed", "usages_refreshed",
            "traits", "reading_processes")
    mode = (detail.get("changes") or {}).get("mode", "?")
    return f"{mode}: " + ", ".join(f"{k} {detail[k]}" for k in keys if k in detail)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=10000)
    parser.add_argument("--servers", type=int, default=200000)
    parser.add_argument("--gpus-per-host", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--placement-processes", type=int, default=1,
                        help="[sync] placement_processes")
    parser.add_argument("--no-floor", action="store_true", help="skip the HTTP floor")
    args = parser.parse_args()

    context = multiprocessing.get_context("spawn")
    ready = context.Queue()
    started = time.perf_counter()
    cloud = context.Process(target=serve, args=(args.hosts, args.servers, args.gpus_per_host,
                                                ready), daemon=True)
    cloud.start()
    url, providers = ready.get(timeout=1800)
    print(f"fake cloud: {args.hosts} hosts, {args.servers} servers, {providers} providers "
          f"(built in {time.perf_counter() - started:.0f} s, served by another process)")
    database = scratch_database()
    try:
        conf = config.load(environ={}, overrides={
            "database.connection": database, "sync.concurrency": args.concurrency,
            "sync.placement_processes": args.placement_processes,
            "openstack.auth_url": f"{url}/identity/v3", "openstack.username": "admin",
            "openstack.password": "secret", "openstack.project_name": "admin"})
        engine = make_engine(database)
        sources = build_sources(conf, ("nova", "placement"))
        readers = ChildMemory(os.getpid(), skip=cloud.pid) if args.placement_processes > 1 \
            else None
        churn = max(1, args.servers // 1000)
        for run in ("full", "unchanged", "churn"):
            if run == "churn":  # a minute's worth of changes: 0.1 % of the servers
                requests.post(f"{url}/bench/churn", params={"servers": churn}, timeout=60)
                print(f"churn: {churn} servers deleted and {churn} booted")
            total = 0.0
            for source in sources:
                before = requests.get(f"{url}/bench/calls", timeout=60).json()
                cpu = time.process_time()
                result = run_source(engine, source, conf.get("sync", "batch_size"))
                if not result.ok:
                    raise SystemExit(f"{source.name} failed: {result.error}")
                cpu = time.process_time() - cpu
                after = requests.get(f"{url}/bench/calls", timeout=60).json()
                calls = after["calls"] - before["calls"]
                total += result.duration
                print(f"{run:9s} {source.name:9s} {result.duration:7.1f} s  "
                      f"{result.rows:7d} rows  {result.changed:7d} changed  {calls:6d} API calls"
                      f"  CPU: sync {cpu:.1f} s, fake cloud {after['cpu'] - before['cpu']:.1f} s"
                      f"  {describe(engine, source.name)}")
            print(f"{run:9s} {'total':9s} {total:7.1f} s")
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"peak memory of the sync process: {peak:.0f} MiB")
        if readers is not None:
            print(f"peak memory of the largest reading process: {readers.peak_mib:.0f} MiB "
                  f"(sampled every {readers.interval} s)")
            readers.stop()
        engine.dispose()
        if not args.no_floor:
            http_floor(url, args.concurrency)
    finally:
        cloud.terminate()
        drop_database(database)


if __name__ == "__main__":
    main()
