"""GPU power from agent reports: stored (revision 0012), read back, loaded into the view."""

import copy
from datetime import UTC, datetime

import pytest
from alembic import command
from sqlalchemy import inspect

from cortex.db import migrate
from cortex.db.engine import make_engine
from cortex.knowledge.energy import host_power
from cortex.knowledge.loader import load_view, read_version
from cortex.knowledge.reports import load_topologies, read_reports
from cortex.store.reports import store_report
from tests.topology_fakes import agent_report

HOST = "cmp0000"  # an HGX host of the demo fleet


@pytest.fixture(scope="module")
def hgx_report(tmp_path_factory):
    """The agent's HGX report, each GPU drawing a different power."""
    report = agent_report("hgx-h100-8gpu", tmp_path_factory.mktemp("hgx"), host=HOST)
    for number, gpu in enumerate(report["gpus"]):
        gpu["power_watts"] = 70.25 + 100 * number
    report["gpus"][7]["power_watts"] = None  # NVML could not say
    return report


def test_power_round_trips_through_the_tables_and_into_the_view(db, hgx_report):
    store_report(db, HOST, hgx_report, datetime.now(UTC))
    expected = [70.25 + 100 * n for n in range(7)] + [None]
    document = read_reports(db, [HOST])[HOST]
    assert [g["power_watts"] for g in document["gpus"]] == expected
    assert [g.power_watts for g in load_topologies(db, [HOST])[HOST].gpus] == expected
    state = load_view(db).hosts[HOST]
    assert [g.power_watts for g in state.topology.gpus] == expected
    assert host_power(state) == (pytest.approx(sum(expected[:7])), "nvml")


def test_a_report_without_power_reads_back_null(db, hgx_report):
    bare = copy.deepcopy(hgx_report)
    for gpu in bare["gpus"]:
        del gpu["power_watts"]  # an agent older than the power reading
    store_report(db, HOST, bare, datetime.now(UTC))
    assert {g["power_watts"] for g in read_reports(db, [HOST])[HOST]["gpus"]} == {None}
    assert host_power(load_view(db).hosts[HOST]) == (None, None)


def test_a_change_of_power_alone_moves_no_version_but_the_next_load_reads_it(db, hgx_report):
    store_report(db, HOST, hgx_report, datetime(2026, 11, 26, 12, 0, tzinfo=UTC))
    first = load_view(db)
    busier = copy.deepcopy(hgx_report)
    busier["gpus"][0]["power_watts"] = 650.0
    answer = store_report(db, HOST, busier, datetime(2026, 11, 26, 12, 1, tzinfo=UTC))
    assert answer["knowledge_changed"] is False
    assert read_version(db) == first.version
    again = load_view(db, previous=first)  # e.g. after another source moved the version
    assert again.hosts[HOST].topology.gpus[0].power_watts == 650.0
    before, after = first.hosts[HOST].topology, again.hosts[HOST].topology
    assert after.gpus == before.gpus and after.cells == before.cells  # the same topology


def test_revision_0012_adds_and_removes_the_column(empty_database_url):
    engine = make_engine(empty_database_url)
    try:
        migrate.upgrade(engine)
        assert "power_watts" in {c["name"] for c in inspect(engine).get_columns("gpus")}
        cfg = migrate.alembic_config(engine.url.render_as_string(hide_password=False))
        with engine.begin() as connection:
            cfg.attributes["connection"] = connection
            command.downgrade(cfg, "0011")
        assert migrate.current_revision(engine) == "0011"
        assert "power_watts" not in {c["name"] for c in inspect(engine).get_columns("gpus")}
        migrate.upgrade(engine)
        assert "power_watts" in {c["name"] for c in inspect(engine).get_columns("gpus")}
    finally:
        engine.dispose()
