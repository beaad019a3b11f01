"""Groups all or nothing: what a group's first call costs, and the demo of docs/groups.md.

``python bench/groups.py``: on a view of ``--boards`` free HGX H100 boards (8 GPUs
each), the scheduler service in process with the shipped ``kvm-gpu-topology-aware``
pipeline and a reservation store on a fresh PostgreSQL database (the test suite's
server, ``CORTEX_TEST_DATABASE_URL`` or 127.0.0.1:5432), times the first call of a
multi-create of 1 (a lone create), 4, 8 and 16 members of 8 GPUs each (the call that
plans and promises every member), and a later member's call. Median and p90 of
``--repeat`` groups, the tables emptied between them.

``python bench/groups.py --demo``: the demo fleet through the app, as
docs/groups.md shows it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sqlalchemy import delete  # noqa: E402

from cortex import conf  # noqa: E402
from cortex.db import models  # noqa: E402
from cortex.db.engine import make_engine  # noqa: E402
from cortex.db.migrate import upgrade  # noqa: E402
from cortex.pipeline.config import load_pipelines  # noqa: E402
from cortex.scheduler.service import RunOptions, SchedulerService, SchedulerSettings  # noqa: E402
from cortex.store.reservations import ReservationStore  # noqa: E402
from tests.conftest import (  # noqa: E402
    _create_postgres_database,
    _drop_postgres_database,
    demo_database,
)
from tests.fakes import ViewCache, nova, view  # noqa: E402
from tests.gpu_fakes import gpu_host  # noqa: E402

LIVE = RunOptions(pipeline="kvm-gpu-topology-aware")


def member(hosts, index, request_id, members):
    """Member ``index`` of a multi-create of ``members`` 8x H100 instances."""
    return nova("gpu-8xh100-full-node", hosts=hosts, flavor={"root_gb": 0},
                spec={"num_instances": members, "instance_uuid": f"{request_id}-i{index}"},
                context={"request_id": request_id, "global_request_id": None})


def timings(boards: int, repeat: int) -> None:
    """Print the first and a later call's times per group size."""
    url = _create_postgres_database("groups_bench")
    engine = make_engine(url)
    try:
        upgrade(engine)
        current = view(*(gpu_host(f"g{i:03d}") for i in range(boards)), service="nova")
        hosts = list(current.hosts)
        scheduler = SchedulerService(
            load_pipelines(conf.shipped_file("pipelines.yaml")), ViewCache(current),
            SchedulerSettings(reservation_ttl=300, request_time_budget=0),
            reservations=ReservationStore(engine))
        print(f"{boards} free 8-GPU boards, {repeat} groups per size; ms per call")
        print("| members | first call p50 | first call p90 | later call p50 | placed |")
        print("|---|---|---|---|---|")
        for size in (1, 4, 8, 16):
            first, later, placed = [], [], 0
            for run in range(repeat):
                with engine.begin() as connection:
                    connection.execute(delete(models.InflightReservation))
                    connection.execute(delete(models.GroupPromise))
                rid = f"req-{size}-{run}"
                started = time.perf_counter()
                decision = scheduler.schedule(member(hosts, 0, rid, size), LIVE)
                first.append((time.perf_counter() - started) * 1000)
                placed += bool(decision.result)
                if size > 1:
                    started = time.perf_counter()
                    scheduler.schedule(member(hosts, 1, rid, size), LIVE)
                    later.append((time.perf_counter() - started) * 1000)
            first.sort()
            print(f"| {size} | {statistics.median(first):.1f} | "
                  f"{first[int(len(first) * 0.9)]:.1f} | "
                  f"{statistics.median(later):.1f} | {placed}/{repeat} |" if later else
                  f"| {size} | {statistics.median(first):.1f} | "
                  f"{first[int(len(first) * 0.9)]:.1f} | - | {placed}/{repeat} |")
    finally:
        engine.dispose()
        _drop_postgres_database(url)


def demo() -> None:
    """The demo fleet's cmp0007 (room for three) asked for groups of four and three."""
    from cortex.api.app import create_app
    from tests.api.conftest import make_conf, stop_app
    from tests.fakes import nova_body

    with demo_database("groups_demo") as (url, engine):
        app = create_app(make_conf(**{"database.connection": url,
                                      "scheduler.reservation_ttl": 300.0}), engine=engine)
        client, ids = app.test_client(), []

        def call(rid, index, members):
            body = nova_body(hosts=["cmp0007"],
                             flavor={"vcpus": 2, "memory_mb": 3072, "root_gb": 40},
                             spec={"instance_uuid": f"{rid}-{index}", "num_instances": members},
                             context={"request_id": rid})
            answer = client.post("/scheduler/nova/external", json=body)
            ids.append(answer.headers["x-cortex-decision-id"])
            return answer.get_json()

        print("4 members, room for 3:", call("req-a", 0, 4))
        print("3 members:", *(call("req-b", i, 3) for i in range(3)))
        app.extensions["cortex"].reservations.refresh(5)
        listed = client.get("/v1/reservations").get_json()
        print(json.dumps(listed["groups"], indent=2))
        print([(r["host"], r["instance_uuid"]) for r in listed["reservations"]])
        app.extensions["cortex"].decisions.flush(5)
        for decision_id in ids[:2]:
            steps = client.get(f"/v1/decisions/{decision_id}").get_json()["steps"]
            print(*(s["detail"] for s in steps if s["name"] == "inflight_reservations"))
        for line in client.get("/metrics").get_data(as_text=True).splitlines():
            if line.startswith("cortex_group_placements_total"):
                print(line)
        stop_app(app)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boards", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--demo", action="store_true")
    args = parser.parse_args()
    print(f"# {datetime.now(UTC):%Y-%m-%d}")
    if args.demo:
        demo()
    else:
        timings(args.boards, args.repeat)


if __name__ == "__main__":
    main()
