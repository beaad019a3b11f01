"""Real processes: a sync killed in the middle loses nothing; one leader among replicas."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from sqlalchemy import select, text

from cortex.db import models
from tests.conftest import REPO
from tests.real_servers import free_port
from tests.sync.test_nova import fill
from tests.waiting import DEADLINE

pytestmark = pytest.mark.functional
INTERVAL = 2.0


def write_config(path, database_url, fake, **sections) -> str:
    lines = ["[database]", f"connection = {database_url}", "[openstack]"]
    lines += [f"{k.split('.')[1]} = {v}" for k, v in fake.clouds_yaml_auth().items()]
    for section, options in sections.items():
        lines.append(f"[{section}]")
        lines += [f"{k} = {v}" for k, v in options.items()]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def snapshot(engine) -> dict:
    """Every synced and knowledge table the Nova source writes, and the version."""
    tables = (models.Server, models.Hypervisor, models.Flavor, models.ServerGroup,
              models.ServerMigration, models.ComputeNode, models.Aggregate,
              models.AggregateHost, models.HostFeature, models.KnowledgeVersion)
    with engine.connect() as c:
        return {m.__tablename__: sorted(tuple(map(str, r)) for r in c.execute(
            select(m.__table__))) for m in tables}


def command(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def test_killing_a_sync_in_the_middle_loses_nothing(openstack, sync_engine, sync_database_url,
                                                    tmp_path):
    fill(openstack.cloud)
    config_file = write_config(tmp_path / "cortex.conf", sync_database_url, openstack,
                               sync={"full_sync_interval": 0})  # every run a full snapshot
    sync_once = command("cortex.cmd.manage", "--config-file", config_file, "sync", "--once",
                        "--source", "nova")
    assert subprocess.run(sync_once, cwd=REPO, timeout=120).returncode == 0
    before = snapshot(sync_engine)

    cloud = openstack.cloud
    del cloud.servers[:300]
    for server in cloud.servers:
        server["status"] = "SHUTOFF"
    for i in range(1200):
        cloud.add_server(f"33333333-0000-4000-8000-{i:012d}", "cmp0001")
    cloud.add_compute_host("cmp0009", "cmp0009.cloud.example")
    release = openstack.hold(f"marker={cloud.servers[1999]['id']}")
    process = subprocess.Popen(sync_once, cwd=REPO)
    try:
        assert openstack.held.wait(60), "the sync never asked for the third page"
        with sync_engine.connect() as c:
            writing = c.execute(text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND state = 'idle in transaction' AND backend_xid IS NOT NULL")).scalar()
            assert writing == 1, "the sync's transaction should hold two pages of writes"
        process.send_signal(signal.SIGKILL)
        process.wait(30)
    finally:
        release.set()
        if process.poll() is None:
            process.kill()
    assert snapshot(sync_engine) == before

    openstack.holds.clear()
    assert subprocess.run(sync_once, cwd=REPO, timeout=120).returncode == 0
    with sync_engine.connect() as c:
        servers = set(c.execute(select(models.Server.uuid)).scalars())
        hosts = set(c.execute(select(models.Hypervisor.host)).scalars())
    assert servers == {s["id"] for s in cloud.servers} and "cmp0009" in hosts


def metric(port: int, name: str) -> float | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return None


def owner(engine) -> tuple[str | None, object]:
    with engine.connect() as c:
        row = c.execute(select(models.SyncStatus.owner, models.SyncStatus.last_success_at)
                        .where(models.SyncStatus.source == "keystone")).first()
    return (row[0], row[1]) if row else (None, None)


def wait_until(predicate, seconds: float):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"not true within {seconds} s")


def test_one_replica_leads_and_a_standby_takes_over_within_one_interval(
        openstack, sync_engine, sync_database_url, tmp_path):
    openstack.cloud.domains = [{"id": "default", "name": "Default", "enabled": True}]
    openstack.cloud.projects = [{"id": "p1", "name": "gpu-team", "domain_id": "default"}]
    ports, processes = [free_port(), free_port()], []
    for index, port in enumerate(ports):
        config_file = write_config(
            tmp_path / f"sync{index}.conf", sync_database_url, openstack,
            sync={"sources": "keystone", "keystone_interval": INTERVAL, "jitter": 0,
                  "metrics_port": port})
        processes.append(subprocess.Popen(command("cortex.cmd.sync", "--config-file",
                                                  config_file), cwd=REPO))
    try:
        leader_owner = wait_until(lambda: owner(sync_engine)[0], 60)
        by_owner = {f"{socket.gethostname()}:{p.pid}": (p, port)
                    for p, port in zip(processes, ports, strict=True)}
        leader, leader_port = by_owner[leader_owner]
        standby, standby_port = next(v for k, v in by_owner.items() if k != leader_owner)
        first_success = owner(sync_engine)[1]
        wait_until(lambda: owner(sync_engine)[1] != first_success, DEADLINE)
        assert owner(sync_engine)[0] == leader_owner, "only the leader syncs"
        wait_until(lambda: metric(standby_port, "cortex_sync_leader") is not None, 30)
        assert metric(leader_port, "cortex_sync_leader") == 1.0
        assert metric(standby_port, "cortex_sync_leader") == 0.0
        assert metric(leader_port, 'cortex_sync_runs_total{outcome="success",source="keystone"}'
                      ) >= 2

        leader.send_signal(signal.SIGKILL)
        leader.wait(10)
        killed_at = time.monotonic()
        wait_until(lambda: metric(standby_port, "cortex_sync_leader") == 1.0, DEADLINE)
        took = time.monotonic() - killed_at
        # The standby tries every INTERVAL / 2 s: about a second here. Not a speed target
        # (a busy machine takes longer): five intervals tell a standby that polls from
        # one that waits for something else, such as a lease running out.
        assert took < 5 * INTERVAL, f"the standby took the lock after {took:.1f} s"
        wait_until(lambda: owner(sync_engine)[0] == f"{socket.gethostname()}:{standby.pid}",
                   DEADLINE)

        standby.send_signal(signal.SIGTERM)
        assert standby.wait(30) == 0
        with sync_engine.connect() as c:
            held = c.execute(text(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND "
                "database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            )).scalar()
        assert held == 0, "a stopped leader gives its lock back"
    finally:
        for process in processes:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)
                process.wait()
