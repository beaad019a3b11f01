"""Scale-out: two gunicorns (two workers each) and two cortex-sync on one PostgreSQL.

After the knowledge changes, every API process answers the new ranking once the
view refresh interval has passed, and the syncs keep one leader meanwhile.
"""

from __future__ import annotations

import copy
import json
import os
import re
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from cortex.api.app import create_app
from cortex.store.fleet import import_fleet, read_fleet
from tests.conftest import FIXTURES, REPO, load_body
from tests.functional.test_gunicorn import request, start_gunicorn
from tests.real_servers import free_port
from tests.sync.conftest import sync_conf
from tests.sync.test_processes import command, owner, wait_until, write_config
from tests.waiting import DEADLINE

pytestmark = pytest.mark.functional
REFRESH = 1.0  # [database] knowledge_check_interval of the API processes
BODY = load_body(FIXTURES / "nova" / "cpu-general-purpose.json")


def answer(url: str) -> list[str]:
    status, payload = request(f"{url}/scheduler/nova/external", BODY)
    assert status == 200, payload
    return json.loads(payload)["hosts"]


def expected_answer(database_url: str, engine) -> list[str]:
    """The ranking a fresh in-process app computes from the database now."""
    app = create_app(sync_conf(database_url), engine=engine)
    try:
        response = app.test_client().post("/scheduler/nova/external", json=BODY)
        assert response.status_code == 200
        return response.get_json()["hosts"]
    finally:
        app.extensions["cortex"].decisions.close()


def loaded(log, version: int) -> set[str]:
    """Pids of the workers whose log says they loaded knowledge ``version``."""
    pattern = re.compile(rf" (\d+) INFO cortex\.knowledge\.cache \[[^]]*\] knowledge view "
                         rf"loaded: version {version},")
    return {m[1] for m in pattern.finditer(log.read_text())}


def version(engine) -> int:
    with engine.connect() as c:
        return c.exec_driver_sql("SELECT version FROM knowledge_version").scalar()


def test_api_processes_agree_after_a_knowledge_change(openstack, sync_engine,
                                                      sync_database_url, tmp_path):
    fleet = read_fleet(REPO / "etc/cortex/demo-fleet.yaml")
    with sync_engine.begin() as connection:
        import_fleet(connection, fleet)
    openstack.cloud.domains = [{"id": "default", "name": "Default", "enabled": True}]
    openstack.cloud.projects = [{"id": "p1", "name": "gpu-team", "domain_id": "default"}]
    syncs, apis = [], []
    try:
        for index in range(2):
            config_file = write_config(
                tmp_path / f"sync{index}.conf", sync_database_url, openstack,
                sync={"sources": "keystone", "keystone_interval": 2.0, "jitter": 0,
                      "metrics_port": free_port()})
            syncs.append(subprocess.Popen(command("cortex.cmd.sync", "--config-file",
                                                  config_file), cwd=REPO))
        wait_until(lambda: owner(sync_engine)[0], 60)
        for _ in range(2):
            apis.append(start_gunicorn(
                free_port(), sync_database_url, tmp_path,
                CORTEX_DATABASE_KNOWLEDGE_CHECK_INTERVAL=str(REFRESH)))
        urls = [f"http://127.0.0.1:{p.args[p.args.index('--bind') + 1].split(':')[1]}"
                for p, _ in apis]
        before = expected_answer(sync_database_url, sync_engine)
        assert {tuple(answer(u)) for u in urls for _ in range(4)} == {tuple(before)}

        # The change: the first choice's compute service is disabled.
        changed = copy.deepcopy(fleet)
        next(h for h in changed["hosts"] if h["host"] == before[0])["enabled"] = False
        with sync_engine.begin() as connection:
            import_fleet(connection, changed)
        new_version = version(sync_engine)
        changed_at = time.monotonic()
        after = expected_answer(sync_database_url, sync_engine)
        assert after != before and before[0] not in after

        time.sleep(max(0.0, changed_at + REFRESH + 0.1 - time.monotonic()))
        during = []
        with ThreadPoolExecutor(8) as pool:  # concurrent, so that every worker answers
            # Asked until every worker loaded the new version: a worker reloads once it
            # answers after the interval, and a busy machine may take a while to give
            # every worker a call. How long it took is for the benchmarks.
            deadline = time.monotonic() + 2 * DEADLINE
            while not all(len(loaded(log, new_version)) == 2 for _, log in apis):
                assert time.monotonic() < deadline, \
                    "every worker of both gunicorns loaded the new knowledge"
                during += pool.map(answer, urls * 8)
            # While a worker reloads, its other threads answer from the previous view.
            assert {tuple(a) for a in during} <= {tuple(before), tuple(after)}
            final = list(pool.map(answer, urls * 16))
        assert {tuple(a) for a in final} == {tuple(after)}
        assert all(s.poll() is None for s in syncs), "both syncs still run"
        assert owner(sync_engine)[0] in {f"{os.uname().nodename}:{s.pid}" for s in syncs}
    finally:
        for process, _log in apis:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=20)
        for process in syncs:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=30)
