"""cortex-descheduler: moves earlier passes left open are followed to their end in Nova.

A move is stored ``running`` before Nova is asked; a process killed while it follows
the move leaves it so, and one out of time stores ``timed_out`` while Nova may still be
making it. Each executing pass first looks at those moves in Nova (the fake Nova over
HTTP through openstacksdk, on the demo fleet in PostgreSQL): ended ones are stored
``completed`` or ``failed`` with Nova's answer, and an instance Nova still moves (or
that Nova cannot be asked about) is not moved again, whatever the cool-down says.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import delete, select

from cortex import conf as config
from cortex.db import models
from cortex.descheduler.nova import NovaMover
from cortex.descheduler.runner import DeschedulerMetrics, run_once
from cortex.plugins.detectors.gpu_island import GpuIslandDetector
from cortex.scheduler.deschedule import InFlight, Limits, Move, NoHistory, plan
from cortex.store.moves import read_history, record_moves
from cortex.sync.openstack import connect
from tests.api.conftest import stop_app
from tests.api.test_descheduler import (
    GPU_VM,
    VGPU_VM,
    bodies_of,
    fake_nova_cloud,
    openstack_options,
    services_of,
)
from tests.conftest import demo_database
from tests.fake_openstack import FakeOpenStack
from tests.waiting import ManualClock

GPU_MOVES = Limits(cold_migrate_passthrough=True)
HOUR = 3600.0


@pytest.fixture(scope="module")
def demo_pg():
    """``(url, engine)`` of a PostgreSQL database of this module's, demo fleet loaded."""
    with demo_database("descheduler_open") as found:
        yield found


@pytest.fixture
def services(demo_pg):
    """The API's services on it, no move recorded yet."""
    url, engine = demo_pg
    with engine.begin() as connection:
        connection.execute(delete(models.DeschedulerMove))
    app, found = services_of(url, engine)
    yield found
    stop_app(app)


def mover_of(fake, timeout: float = 10.0) -> NovaMover:
    """A NovaMover on the fake whose waits move a manual clock (no real sleep)."""
    clock = ManualClock()
    conf = config.load(environ={}, overrides=openstack_options(fake))
    return NovaMover(connect(conf), timeout=timeout, poll_interval=1.0, clock=clock,
                     sleep=clock.advance)


def actions(fake, instance: str = GPU_VM) -> int:
    """The actions (migrate, confirmResize) asked of Nova for ``instance``."""
    return sum(method == "POST" and path.endswith(f"/servers/{instance}/action")
               for method, path, _ in fake.requests)


def stored(engine, instance: str = GPU_VM) -> list:
    """The instance's moves asked of Nova (not skipped or proposed), oldest first."""
    table = models.DeschedulerMove
    with engine.connect() as connection:
        return connection.execute(select(table).where(
            table.instance_uuid == instance, table.state.not_in(("skipped", "proposed")))
            .order_by(table.created_at)).all()


def result_of(report, instance: str = GPU_VM):
    return next(r for r in report.results if r.move.instance_uuid == instance)


def left_open(engine, instance: str, source: str, target: str, kind: str,
              age: timedelta) -> str:
    """A move stored ``running`` ``age`` ago, as a killed process leaves it; its id."""
    move = Move(instance, source, target, "detector_gpu_island", "frees 8 GPUs", kind,
                "planned")
    with engine.begin() as connection:
        (move_id,) = record_moves(connection, "killed-run", [move],
                                  datetime.now(UTC) - age, execute=True)
    return move_id


def server(cloud, instance: str = GPU_VM) -> dict:
    return next(s for s in cloud.servers if s["id"] == instance)


def migrating(cloud, instance: str, source: str, target: str, status: str = "RESIZE",
              task: str = "resize_migrating") -> None:
    """Nova in the middle of moving ``instance``: its server and its migration record."""
    server(cloud, instance).update({"status": status, "OS-EXT-STS:task_state": task})
    cloud.migrations.append({
        "id": len(cloud.migrations) + 1, "uuid": f"00000000-0000-4000-8000-{instance[-12:]}",
        "instance_uuid": instance, "migration_type": "migration", "status": "migrating",
        "source_compute": source, "source_node": source, "dest_compute": target,
        "dest_node": target, "dest_host": None, "old_instance_type_id": 1,
        "new_instance_type_id": 1, "created_at": "2026-11-26T00:00:00Z",
        "updated_at": "2026-11-26T00:00:00Z"})


def test_a_timed_out_move_is_followed_and_not_asked_again_while_nova_makes_it(services):
    engine = services.engine
    cloud = fake_nova_cloud()
    cloud.move_reads = 1_000_000  # Nova never ends it by itself
    with FakeOpenStack(cloud) as fake:
        mover = mover_of(fake)
        first = run_once(services, [GpuIslandDetector()], GPU_MOVES, True, HOUR,
                         mover=lambda: mover)
        assert result_of(first).state == "timed_out" and actions(fake) == 1
        target = result_of(first).move.target

        # no cool-down at all: only Nova's answer keeps it from a second migrate
        second = run_once(services, [GpuIslandDetector()], GPU_MOVES, True, 0.0,
                          mover=lambda: mover)
        assert actions(fake) == 1, "a second migrate while Nova still migrates"
        (followed,) = second.followed
        assert followed.state == "timed_out" and followed.detail.startswith(
            "Nova still moves it (Nova: RESIZE, task resize_migrating, on cmp0011; "
            f"migration cmp0011 -> {target} migrating)")
        assert result_of(second).state == "skipped"
        assert result_of(second).detail == "an earlier move is not over: " + followed.detail
        (row,) = stored(engine)
        assert (row.state, row.detail) == ("timed_out", followed.detail)

        cloud.moving[GPU_VM]["reads"] = 1  # the next read finds it on the target
        third = run_once(services, [GpuIslandDetector()], GPU_MOVES, True, HOUR,
                         mover=lambda: mover)
        ended = datetime.now(UTC)
    (followed,) = third.followed
    assert followed.state == "completed"
    assert followed.detail.startswith(f"cold-migrated to {target} and confirmed (Nova: "
                                      f"VERIFY_RESIZE, task none, on {target}")
    (row,) = stored(engine)
    assert (row.state, row.detail) == ("completed", followed.detail)
    assert row.finished_at > row.created_at and row.finished_at <= ended
    assert actions(fake) == 2 and cloud.migrations[-1]["status"] == "confirmed"
    assert len(cloud.migrations) == 1  # one migrate, then its confirmResize
    # completed now, within the cool-down: still not moved again
    assert result_of(third).detail == "moved within the cool-down"


@pytest.mark.parametrize("nova, state, detail", [
    ({"status": "VERIFY_RESIZE", "host": "cmp0010"}, "completed",
     "cold-migrated to cmp0010 and confirmed (Nova: VERIFY_RESIZE, task none, on cmp0010; "
     "migration cmp0011 -> cmp0010 migrating)"),
    ({"status": "ACTIVE", "host": "cmp0010"}, "completed",
     "cold-migrated to cmp0010 (Nova: ACTIVE, task none, on cmp0010; "
     "migration cmp0011 -> cmp0010 migrating)"),
    ({"status": "ACTIVE", "host": "cmp0011"}, "failed",
     "Nova left the instance on cmp0011 (Nova: ACTIVE, task none, on cmp0011; "
     "migration cmp0011 -> cmp0010 migrating)"),
    ({"status": "ERROR", "host": "cmp0011"}, "failed",
     "the instance went to ERROR on cmp0011 (Nova: ERROR, task none, on cmp0011; "
     "migration cmp0011 -> cmp0010 migrating)"),
    (None, "failed", "Nova no longer knows the instance (404)"),
])
def test_a_move_a_killed_process_left_running_ends_as_nova_shows_it(services, nova, state,
                                                                     detail):
    engine = services.engine
    cloud = fake_nova_cloud()
    move_id = left_open(engine, GPU_VM, "cmp0011", "cmp0010", "cold", timedelta(minutes=10))
    migrating(cloud, GPU_VM, "cmp0011", "cmp0010")
    if nova is None:
        cloud.servers.remove(server(cloud))
    else:
        server(cloud).update({"status": nova["status"], "OS-EXT-STS:task_state": None,
                              "OS-EXT-SRV-ATTR:host": nova["host"]})
    metrics = DeschedulerMetrics()
    with FakeOpenStack(cloud) as fake:
        report = run_once(services, [GpuIslandDetector()], GPU_MOVES, True, HOUR,
                          mover=lambda: mover_of(fake), metrics=metrics)
    (followed,) = report.followed
    assert (followed.id, followed.state, followed.detail) == (move_id, state, detail)
    (row,) = stored(engine)
    assert (row.state, row.detail) == (state, detail) and row.finished_at is not None
    assert metrics.moves.labels("detector_gpu_island", "cold", state)._value.get() == 1
    # ended within the cool-down, completed or failed: not asked again
    assert result_of(report).detail == "moved within the cool-down"
    assert actions(fake) == (1 if nova and nova["status"] == "VERIFY_RESIZE" else 0)
    assert not report.not_asked


@pytest.mark.parametrize("trouble", ["migrating", "nova_fails", "no_mover"])
def test_an_open_move_nova_still_makes_or_cannot_tell_keeps_its_instance(services, trouble):
    engine = services.engine
    cloud = fake_nova_cloud()
    # older than the cool-down: only Nova's answer (or its silence) holds the instance
    move_id = left_open(engine, GPU_VM, "cmp0011", "cmp0010", "cold", timedelta(hours=2))
    migrating(cloud, GPU_VM, "cmp0011", "cmp0010")
    with FakeOpenStack(cloud) as fake:
        if trouble == "nova_fails":
            fake.failures.add(f"/compute/v2.1/servers/{GPU_VM}")

        def mover():
            if trouble == "no_mover":
                raise RuntimeError("keystone: the catalog has no compute endpoint")
            return mover_of(fake)

        report = run_once(services, [GpuIslandDetector()], GPU_MOVES, True, HOUR,
                          mover=mover)
    (followed,) = report.followed
    (row,) = stored(engine)
    assert row.state == "running" and row.finished_at is None
    assert actions(fake) == 0, "a second migrate while Nova still migrates"
    if trouble == "migrating":
        assert followed.state == "running" and not report.not_asked
        assert followed.detail == row.detail == (
            "Nova still moves it (Nova: RESIZE, task resize_migrating, on cmp0011; "
            "migration cmp0011 -> cmp0010 migrating)")
    else:
        assert followed.state == "unknown" and report.not_asked == [GPU_VM]
        assert followed.detail.startswith("Nova could not be asked: ")
        assert ("injected failure" if trouble == "nova_fails" else "no compute endpoint") \
            in followed.detail
        assert row.detail == ""  # nothing was answered: the record keeps what it said
    assert followed.id == move_id
    assert result_of(report).detail == "an earlier move is not over: " + followed.detail


def test_a_dry_run_asks_nova_nothing_and_keeps_an_open_move_s_instance(services):
    left_open(services.engine, GPU_VM, "cmp0011", "cmp0010", "cold", timedelta(hours=2))

    def mover():
        raise AssertionError("a dry run asked for Nova")

    report = run_once(services, [GpuIslandDetector()], GPU_MOVES, False, HOUR, mover=mover)
    assert [r.state for r in report.followed] == ["running"]
    assert result_of(report).detail == ("an earlier move is not over: still running here; "
                                        "a dry run does not ask Nova")
    assert [r.state for r in stored(services.engine)] == ["running"]


def test_moves_under_way_count_against_the_pass_s_limits(services):
    run = [services.scheduler, [GpuIslandDetector()], bodies_of(services)]
    parse = services.parsers["nova"]
    now = datetime(2026, 11, 26, tzinfo=UTC)
    (free,) = plan(*run, NoHistory(), GPU_MOVES, now, parse=parse)
    assert free.state == "planned"
    # another instance's move under way onto the target it would take: a host's one move
    busy = InFlight(VGPU_VM, "cmp0003", free.target, "Nova still moves it")
    (elsewhere,) = plan(*run, NoHistory(), GPU_MOVES, now, parse=parse, in_flight=[busy])
    assert elsewhere.target != free.target
    # off its own source: the source's one move
    off_source = InFlight(VGPU_VM, "cmp0011", "cmp0003", "Nova still moves it")
    (held,) = plan(*run, NoHistory(), GPU_MOVES, now, parse=parse, in_flight=[off_source])
    assert (held.state, held.detail) == (
        "skipped", "cmp0011 is in 1 move(s) of this run or under way")
    # one move per pass, and one is under way: none planned
    assert plan(*run, NoHistory(), Limits(max_moves=1, cold_migrate_passthrough=True), now,
                parse=parse, in_flight=[InFlight(VGPU_VM, "cmp0003", "cmp0004", "")]) == []


@pytest.mark.parametrize("state, cooling, left", [
    ("running", True, True), ("completed", True, True), ("timed_out", True, True),
    ("failed", True, False), ("proposed", False, False), ("skipped", False, False),
])
def test_every_move_asked_of_nova_holds_its_instance_for_the_cool_down(db, state, cooling,
                                                                       left):
    now = datetime(2026, 11, 26, tzinfo=UTC)
    move = Move(GPU_VM, "cmp0011", "cmp0010", "detector_gpu_island", "frees 8 GPUs", "cold",
                state)
    record_moves(db, "run", [move], now - timedelta(minutes=5), execute=True)
    history = read_history(db, now, HOUR)
    assert history.moved_recently(GPU_VM) is cooling
    # the A -> B -> A check: a failed move left the instance where it was
    assert history.left(GPU_VM) == (frozenset({"cmp0011"}) if left else frozenset())
    assert not read_history(db, now + timedelta(hours=2), HOUR).moved_recently(GPU_VM)
