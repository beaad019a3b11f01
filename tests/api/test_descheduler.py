"""cortex-descheduler: detectors, targets by the pipelines, cycle breaker, Nova moves.

On the demo fleet: cmp0011's one 2xH100 VM alone keeps the HGX board's 8-GPU NVLink
cell from being free, so ``detector_gpu_island`` finds it and the pipeline sends it to
a host whose board is already broken up; cmp0003's CPU steal (0.12) makes
``detector_cpu_contention`` try its vGPU VM, for which no other host has room. The
moves are made against the fake Nova served over HTTP through openstacksdk.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from sqlalchemy import select

from cortex import conf as config
from cortex.api.app import create_app
from cortex.cmd import descheduler as command
from cortex.db import models
from cortex.descheduler.config import load_detectors
from cortex.descheduler.nova import NovaMover
from cortex.descheduler.runner import DeschedulerMetrics, run_once
from cortex.plugins.base import MoveCandidate
from cortex.plugins.detectors.cpu_contention import CpuContentionDetector
from cortex.plugins.detectors.gpu_island import GpuIslandDetector, GpuIslandOptions
from cortex.scheduler.deschedule import Limits, NoHistory, plan
from tests.api.conftest import make_conf, stop_app
from tests.conftest import demo_sqlite
from tests.fake_openstack import FakeCloud, FakeOpenStack

GPU_VM = "9b1e6f0a-2c4d-4e8f-a1b3-5d7c00000011"
VGPU_VM = "7d0c4c39-0b1e-4a51-9d4c-2b7f00000006"
NOW = datetime(2026, 11, 26, tzinfo=UTC)


@pytest.fixture(autouse=True)
def pytest_keeps_its_log_handlers(monkeypatch):
    """The command would point the root logger at a stream pytest closes after the test."""
    monkeypatch.setattr(command, "setup_logging", lambda conf: None)


@pytest.fixture
def demo(tmp_path):
    """``(url, engine, conf file)`` of a SQLite demo fleet of the test's own."""
    url, engine = demo_sqlite(tmp_path / "cortex.sqlite")
    yield url, engine
    engine.dispose()


def services_of(url, engine, **overrides):
    app = create_app(make_conf(**{"database.connection": url} | overrides), engine=engine)
    return app, app.extensions["cortex"]


def bodies_of(services):
    from cortex.descheduler.runner import move_spec
    from cortex.store.moves import server_flavors

    view = services.knowledge.view()

    def bodies(instance, host):
        with services.engine.connect() as connection:
            return move_spec(view, instance, host, server_flavors(connection, [instance])
                             .get(instance))
    return bodies


def test_the_island_detector_finds_the_one_vm_that_keeps_a_board_from_being_free(demo):
    app, services = services_of(*demo)
    try:
        found = GpuIslandDetector().detect(services.knowledge.view(), NOW)
    finally:
        stop_app(app)
    assert [(c.instance_uuid, c.host, c.frees_gpus) for c in found] == [(GPU_VM, "cmp0011", 8)]
    assert found[0].gpus == ("0000:18:00.0", "0000:2a:00.0")
    # a threshold above one board's 8 GPUs finds nothing
    assert GpuIslandDetector(GpuIslandOptions(min_cell=9)).detect(
        services.knowledge.view(), NOW) == []


def test_the_pipelines_choose_a_target_that_breaks_no_whole_board(demo):
    app, services = services_of(*demo)
    try:
        moves = plan(services.scheduler, [GpuIslandDetector()], bodies_of(services),
                     NoHistory(), Limits(cold_migrate_passthrough=True), NOW,
                     parse=services.parsers["nova"])
        view = services.knowledge.view()
    finally:
        stop_app(app)
    (move,) = moves
    assert (move.instance_uuid, move.source, move.kind, move.state) == (
        GPU_VM, "cmp0011", "cold", "planned")
    target = view.hosts[move.target]
    # the target's board was broken up already: it loses no whole cell
    assert sum(not g.in_use for g in target.topology.gpus) < 8
    assert move.gpus_won == 8


def test_passthrough_moves_are_only_proposed_unless_cold_migration_is_allowed(demo):
    app, services = services_of(*demo)
    try:
        (move,) = plan(services.scheduler, [GpuIslandDetector()], bodies_of(services),
                       NoHistory(), Limits(), NOW, parse=services.parsers["nova"])
    finally:
        stop_app(app)
    assert move.state == "proposed" and "cold_migrate_passthrough" in move.detail


class Moved:
    """A history in which the GPU VM moved recently, or left some hosts."""

    def __init__(self, recent=(), left=()):
        self.recent, self.sources = set(recent), frozenset(left)

    def moved_recently(self, instance):
        return instance in self.recent

    def left(self, instance):
        return self.sources if instance == GPU_VM else frozenset()


def test_the_cycle_breaker_skips_a_recent_move_and_never_goes_back(demo):
    app, services = services_of(*demo)
    try:
        run = [services.scheduler, [GpuIslandDetector()], bodies_of(services)]
        (first,) = plan(*run, NoHistory(), Limits(), NOW, parse=services.parsers["nova"])
        (cooling,) = plan(*run, Moved(recent=[GPU_VM]), Limits(), NOW,
                          parse=services.parsers["nova"])
        (other,) = plan(*run, Moved(left=[first.target]), Limits(), NOW,
                        parse=services.parsers["nova"])
    finally:
        stop_app(app)
    assert cooling.state == "skipped" and cooling.detail == "moved within the cool-down"
    assert other.target not in (None, first.target)  # A -> B -> A: never back to B


def test_a_contended_host_s_busiest_vm_is_tried_and_skipped_without_room(demo):
    app, services = services_of(*demo)
    try:
        view = services.knowledge.view()
        found = CpuContentionDetector().detect(view, NOW)
        moves = plan(services.scheduler, [CpuContentionDetector()], bodies_of(services),
                     NoHistory(), Limits(), NOW, parse=services.parsers["nova"])
    finally:
        stop_app(app)
    assert [(c.host, c.instance_uuid) for c in found] == [("cmp0003", VGPU_VM)]
    (move,) = moves
    assert (move.state, move.kind, move.detail) == (
        "skipped", "live", "the pipeline found no host for it")


def test_limits_bound_the_moves_of_one_run(demo):
    class Twice:
        """The GPU VM found twice (two detectors' worth) and another on the same host."""

        name = "twice"

        def detect(self, view, now):
            return [MoveCandidate(GPU_VM, "cmp0011", "twice", "a", 2.0, frees_gpus=8),
                    MoveCandidate(GPU_VM, "cmp0011", "twice", "b", 1.0, frees_gpus=8)]

    app, services = services_of(*demo)
    try:
        moves = plan(services.scheduler, [Twice(), GpuIslandDetector()], bodies_of(services),
                     NoHistory(), Limits(max_moves=1), NOW, parse=services.parsers["nova"])
    finally:
        stop_app(app)
    assert [m.reason for m in moves] == ["a"]  # once per instance, one move per run


def write_conf(tmp_path, url, **options):
    """A cortex.conf for the command: the demo database, no metrics server, fast polls."""
    sections = {"database": {"connection": url},
                "descheduler": {"metrics_port": "0", "poll_interval": "0.01"}}
    for key, value in options.items():
        section, name = key.split(".")
        sections.setdefault(section, {})[name] = value
    path = tmp_path / "cortex.conf"
    path.write_text("".join(f"[{section}]\n" + "".join(f"{k} = {v}\n" for k, v in values.items())
                            for section, values in sections.items()))
    return str(path)


def test_dry_run_once_prints_and_records_the_moves_and_makes_none(demo, tmp_path, capsys):
    url, engine = demo
    conf_file = write_conf(tmp_path, url)
    assert command.main(["--config-file", conf_file, "--once", "-f", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["executed"] is False
    states = {m["instance_uuid"]: (m["state"], m["target"]) for m in printed["moves"]}
    assert states[GPU_VM][0] == "proposed" and states[GPU_VM][1]
    assert states[VGPU_VM] == ("skipped", None)
    with engine.connect() as connection:
        rows = connection.execute(select(models.DeschedulerMove)).all()
        decision = connection.execute(select(models.Decision.id)).scalars().all()
    assert {r.state for r in rows} == {"proposed", "skipped"}
    gpu_row = next(r for r in rows if r.instance_uuid == GPU_VM)
    assert gpu_row.decision_id in decision  # the target's decision is recorded
    assert "frees 8 GPUs" in gpu_row.reason
    # the table form names the move and why
    assert command.main(["--config-file", conf_file, "--once", "--dry-run"]) == 0
    table = capsys.readouterr().out
    assert GPU_VM in table and "detector_gpu_island" in table
    # the dashboard lists the moves, each linked to the decision that chose its target
    app, _ = services_of(url, engine)
    try:
        page = app.test_client().get("/ui/descheduler")
    finally:
        stop_app(app)
    text = page.get_data(as_text=True)
    assert page.status_code == 200 and text.count(GPU_VM) >= 4  # two runs, two links each
    assert f"/ui/decisions/{gpu_row.decision_id}" in text and "proposed 2" in text


def fake_nova_cloud():
    cloud = FakeCloud()
    for host in ("cmp0003", "cmp0010", "cmp0011"):
        cloud.add_compute_host(host)
    cloud.add_server(GPU_VM, "cmp0011")
    cloud.add_server(VGPU_VM, "cmp0003")
    return cloud


def openstack_options(fake):
    return {f"openstack.{k.split('.')[1]}": v for k, v in fake.clouds_yaml_auth().items()}


def test_execute_cold_migrates_through_nova_and_follows_it_to_the_end(demo, tmp_path, capsys):
    url, engine = demo
    cloud = fake_nova_cloud()
    cloud.move_reads = 3
    with FakeOpenStack(cloud) as fake:
        conf_file = write_conf(tmp_path, url, **openstack_options(fake),
                               **{"descheduler.cold_migrate_passthrough": "true"})
        assert command.main(["--config-file", conf_file, "--once", "--execute",
                             "-f", "json"]) == 0
        printed = json.loads(capsys.readouterr().out)
        actions = [(m, p) for m, p, _ in fake.requests if m == "POST" and "action" in p]
    move = next(m for m in printed["moves"] if m["instance_uuid"] == GPU_VM)
    assert move["state"] == "completed" and move["kind"] == "cold"
    server = next(s for s in cloud.servers if s["id"] == GPU_VM)
    assert (server["OS-EXT-SRV-ATTR:host"], server["status"]) == (move["target"], "ACTIVE")
    assert cloud.migrations[-1]["status"] == "confirmed"
    assert len(actions) == 2  # migrate, then confirmResize
    with engine.connect() as connection:
        row = connection.execute(select(models.DeschedulerMove).where(
            models.DeschedulerMove.instance_uuid == GPU_VM)).one()
    assert row.state == "completed" and row.finished_at is not None
    # the knowledge still shows it on cmp0011 (no sync here): the cool-down holds it
    assert command.main(["--config-file", conf_file, "--once", "--execute", "-f", "json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert next(m for m in again["moves"] if m["instance_uuid"] == GPU_VM)["detail"] == (
        "moved within the cool-down")


@pytest.mark.parametrize("trouble, state, detail", [
    ("refuse_moves", "failed", "Nova refused the move: No valid host was found"),
    ("failing_moves", "failed", "Nova left the instance on cmp0011"),
    ("slow", "timed_out", "not done after"),
])
def test_a_move_nova_refuses_fails_or_never_ends_is_recorded_so(demo, trouble, state, detail):
    url, engine = demo
    cloud = fake_nova_cloud()
    if trouble == "slow":
        cloud.move_reads = 10_000
    else:
        getattr(cloud, trouble).add(GPU_VM)
    app, services = services_of(url, engine)
    with FakeOpenStack(cloud) as fake:
        conf = config.load(environ={}, overrides=openstack_options(fake))
        from cortex.sync.openstack import connect

        mover = NovaMover(connect(conf), timeout=0.3, poll_interval=0.01)
        metrics = DeschedulerMetrics()
        try:
            report = run_once(services, [GpuIslandDetector()],
                              Limits(cold_migrate_passthrough=True), True, 3600,
                              mover=lambda: mover,
                              metrics=metrics)
        finally:
            stop_app(app)
    (result,) = report.results
    assert result.state == state and detail in result.detail
    assert report.failed == 1
    assert metrics.moves.labels("detector_gpu_island", "cold", state)._value.get() == 1
    with engine.connect() as connection:
        assert connection.execute(select(models.DeschedulerMove.state)).scalar_one() == state


@pytest.mark.parametrize("text, message", [
    ("detectors: []", "detectors"),
    ("detectors: [{name: detector_nope}]", "unknown detector 'detector_nope'"),
    ("detectors: [{name: detector_gpu_island, options: {min_cell: 1}}]", "min_cell 1"),
    ("detectors: [{name: detector_gpu_island, options: {cells: 4}}]", "unknown option"),
])
def test_a_bad_detectors_file_is_refused_at_load(tmp_path, text, message):
    path = tmp_path / "descheduler.yaml"
    path.write_text(text)
    conf = config.load(environ={}, overrides={"descheduler.detectors_file": str(path)})
    with pytest.raises(config.ConfigError, match=message):
        load_detectors(conf)


def test_the_shipped_detectors_load_in_order():
    names = [d.name for d in load_detectors(config.load(environ={}))]
    assert names == ["detector_cpu_contention", "detector_reservation_overcommit",
                     "detector_gpu_island"]
