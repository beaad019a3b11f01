"""A real cortex-descheduler killed (SIGKILL) while Nova moves an instance, then fresh passes.

The process stores the move ``running`` and asks the fake Nova (over HTTP, through
openstacksdk) to cold-migrate the demo fleet's GPU VM; the fake keeps the migration in
progress, and the process is killed while it follows it. A fresh pass, with no
cool-down at all, must find the move still under way in Nova and send no second
migrate; once Nova has finished, the next pass confirms it and stores it ``completed``.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
from sqlalchemy import select

from cortex.db import models
from tests.api.test_descheduler import GPU_VM, fake_nova_cloud
from tests.conftest import REPO, demo_database
from tests.fake_openstack import FakeOpenStack
from tests.waiting import DEADLINE, wait_until

pytestmark = pytest.mark.functional


def write_config(path, database_url, fake, **descheduler) -> list[str]:
    """The command line of one executing pass on ``path``'s cortex.conf."""
    options = {"cold_migrate_passthrough": "true", "poll_interval": "0.05",
               "move_timeout": "3600", "metrics_port": "0"} | descheduler
    lines = ["[database]", f"connection = {database_url}", "[openstack]"]
    lines += [f"{k.split('.')[1]} = {v}" for k, v in fake.clouds_yaml_auth().items()]
    lines += ["[descheduler]"] + [f"{k} = {v}" for k, v in options.items()]
    path.write_text("\n".join(lines) + "\n")
    return [sys.executable, "-m", "cortex.cmd.descheduler", "--config-file", str(path),
            "--once", "--execute", "-f", "json"]


def server_requests(fake) -> list[str]:
    """The methods of the requests for the GPU VM's server and its actions, in order."""
    return [method for method, path, _ in fake.requests
            if path.endswith((f"/servers/{GPU_VM}", f"/servers/{GPU_VM}/action"))]


def moves_of(engine) -> list:
    table = models.DeschedulerMove
    with engine.connect() as connection:
        return connection.execute(select(table).where(
            table.instance_uuid == GPU_VM, table.state.not_in(("skipped", "proposed")))).all()


def one_pass(argv) -> dict:
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_a_killed_descheduler_s_move_is_followed_to_its_end_and_never_sent_twice(tmp_path):
    cloud = fake_nova_cloud()
    cloud.move_reads = 1_000_000_000  # Nova does not end the migration until told
    with demo_database("descheduler_kill") as (url, engine), FakeOpenStack(cloud) as fake:
        first = write_config(tmp_path / "first.conf", url, fake)
        log = (tmp_path / "killed.log").open("w")
        process = subprocess.Popen(first, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        try:
            # the migrate was sent and the process is following it (reads after the POST)
            wait_until(lambda: process.poll() is not None or (
                "POST" in server_requests(fake)
                and server_requests(fake)[server_requests(fake).index("POST"):].count("GET")
                >= 2), DEADLINE, what="the descheduler following its move")
            assert process.poll() is None, (tmp_path / "killed.log").read_text()
            process.send_signal(signal.SIGKILL)
            assert process.wait(DEADLINE) == -signal.SIGKILL
        finally:
            if process.poll() is None:
                process.kill()
            log.close()
        (killed,) = moves_of(engine)
        assert (killed.state, killed.finished_at) == ("running", None)
        assert server_requests(fake).count("POST") == 1

        # no cool-down: only Nova's answer keeps the descheduler from moving it again
        printed = one_pass(write_config(tmp_path / "again.conf", url, fake, cooldown="0"))
        assert server_requests(fake).count("POST") == 1, "a second migrate while Nova migrates"
        (followed,) = printed["followed"]
        assert (followed["id"], followed["state"]) == (killed.id, "running")
        assert followed["detail"].startswith("Nova still moves it (Nova: RESIZE, task "
                                             "resize_migrating, on cmp0011; migration")
        skipped = next(m for m in printed["moves"] if m["instance_uuid"] == GPU_VM)
        assert skipped["detail"] == "an earlier move is not over: " + followed["detail"]
        (row,) = moves_of(engine)
        assert (row.state, row.detail, row.finished_at) == ("running", followed["detail"], None)

        cloud.moving[GPU_VM]["reads"] = 1  # Nova finishes: the next read shows VERIFY_RESIZE
        printed = one_pass(first)
        (followed,) = printed["followed"]
        target = killed.target_host
        assert (followed["state"], followed["detail"]) == ("completed", (
            f"cold-migrated to {target} and confirmed (Nova: VERIFY_RESIZE, task none, on "
            f"{target}; migration cmp0011 -> {target} finished)"))
        (row,) = moves_of(engine)
        assert (row.id, row.state, row.detail) == (killed.id, "completed", followed["detail"])
        assert row.finished_at is not None
    # one migrate, then its confirmResize; none since
    assert server_requests(fake).count("POST") == 2 and len(cloud.migrations) == 1
    assert cloud.migrations[0]["status"] == "confirmed"
    server = next(s for s in cloud.servers if s["id"] == GPU_VM)
    assert (server["OS-EXT-SRV-ATTR:host"], server["status"]) == (target, "ACTIVE")
    moved = next(m for m in printed["moves"] if m["instance_uuid"] == GPU_VM)
    assert moved["detail"] == "moved within the cool-down"
