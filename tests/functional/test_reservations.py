"""Fifty and two hundred concurrent Nova calls for a nearly full host, through gunicorn with
two workers."""

import math
import signal
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import delete, select

from cortex.db import models
from cortex.knowledge.loader import load_view
from tests.fakes import nova_body
from tests.functional.test_gunicorn import free_port, request, start_gunicorn

pytestmark = pytest.mark.functional
HOST = "cmp0007"  # the demo fleet's nearly full general-purpose host
FLAVOR = {"vcpus": 2, "memory_mb": 3072, "root_gb": 40}


@pytest.fixture
def reserving_gunicorn(engine, database_url, tmp_path):
    """gunicorn (2 workers) with in-flight reservations on; no reservations before or after.

    Before too: an app of another test, built from a configuration file (the default
    TTL), may have promised room on HOST in the session database.
    """
    with engine.begin() as connection:
        connection.execute(delete(models.InflightReservation))
    port = free_port()
    # Every call promised or refused, never answered unpromised: a budget that 200 calls
    # queued on two workers of a loaded 2-core machine do not reach, and an unmade
    # promise a 503 (an unpromised answer naming the host would count as a promise here).
    process, log = start_gunicorn(port, database_url, tmp_path,
                                  CORTEX_SCHEDULER_RESERVATION_TTL="600",
                                  CORTEX_SCHEDULER_REQUEST_TIME_BUDGET="60",
                                  CORTEX_SCHEDULER_PROMISE_FAILURE_POLICY="fail")
    yield f"http://127.0.0.1:{port}"
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=20) == 0
    with engine.begin() as connection:
        connection.execute(delete(models.InflightReservation))
    assert "Traceback" not in log.read_text()


def room(engine):
    """How many FLAVOR instances the synced usage of HOST still has room for."""
    node = load_view(engine).hosts[HOST].all_nodes[0]
    wanted = {"VCPU": FLAVOR["vcpus"], "MEMORY_MB": FLAVOR["memory_mb"],
              "DISK_GB": FLAVOR["root_gb"]}
    return min(math.floor(node.inventories[rc].free / n) for rc, n in wanted.items())


@pytest.mark.parametrize("clients", [50, 200])
def test_concurrent_calls_never_promise_a_resource_twice(reserving_gunicorn, engine, clients):
    slots = room(engine)
    assert 1 <= slots < 50, "the demo host must be nearly full for this test to mean anything"

    def call(i):
        body = nova_body(hosts=[HOST], flavor=FLAVOR,
                         spec={"instance_uuid": str(uuid.uuid4())})
        body["context"]["request_id"] = f"req-{uuid.uuid4()}"
        status, raw = request(f"{reserving_gunicorn}/scheduler/nova/external", body)
        assert status == 200, raw
        return raw

    with ThreadPoolExecutor(max_workers=clients) as pool:
        answers = list(pool.map(call, range(clients)))
    promised = [a for a in answers if HOST.encode() in a]
    assert len(promised) == slots  # every slot used once, none twice
    with engine.connect() as connection:
        rows = connection.execute(select(models.InflightReservation).where(
            models.InflightReservation.host == HOST)).all()
    assert len(rows) == slots
    assert sum(r.resources["MEMORY_MB"] for r in rows) <= \
        load_view(engine).hosts[HOST].all_nodes[0].inventories["MEMORY_MB"].free
