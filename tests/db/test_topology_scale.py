"""Reading the topology of a fleet with more GPUs than one statement may have parameters.

PostgreSQL's wire protocol carries at most 65,535 bind parameters per statement; the
reader once put every GPU id into one ``IN`` list, so a fleet of 10,000 GPU hosts
(80,000 GPUs) could not be loaded and every call answered 503.
"""

from datetime import UTC, datetime

import pytest
from sqlalchemy import insert, select

from cortex.db import migrate, models
from cortex.db.engine import make_engine
from cortex.knowledge.reports import read_reports
from tests.conftest import _create_postgres_database, _drop_postgres_database

HOSTS, GPUS_PER_HOST = 8_200, 8  # 65,600 GPUs: one more host than the protocol allows


@pytest.fixture(scope="module")
def big_fleet():
    url = _create_postgres_database("bigtopology")
    engine = make_engine(url)
    migrate.upgrade(engine)
    when = datetime(2026, 1, 1, tzinfo=UTC)
    with engine.begin() as connection:
        connection.execute(insert(models.HostTopology), [
            {"host": f"gpu{i:05d}", "reported_at": when, "nics": []} for i in range(HOSTS)])
        ids = dict(connection.execute(select(models.HostTopology.host,
                                             models.HostTopology.id)).all())
        connection.execute(insert(models.Gpu), [
            {"host_topology_id": ids[f"gpu{i:05d}"], "pci_address": f"0000:{g:02x}:00.0",
             "vendor_id": "10de", "dev_type": "type-PF", "healthy": True,
             "health_reasons": [], "in_use": False, "vgpus_in_use": 0, "unsupported": []}
            for i in range(HOSTS) for g in range(GPUS_PER_HOST)])
        last_gpu = connection.execute(select(models.Gpu.id).order_by(models.Gpu.id.desc())
                                      .limit(1)).scalar_one()
        connection.execute(insert(models.MigInstance).values(
            gpu_id=last_gpu, instance_id=1, profile_id=9, profile="3g.40gb",
            placement_start=0, placement_size=4, memory_mb=40_000, in_use=True))
    yield engine
    engine.dispose()
    _drop_postgres_database(url)


def test_a_fleet_of_more_gpus_than_a_statement_has_parameters_is_read(big_fleet):
    with big_fleet.connect() as connection:
        reports = read_reports(connection)
    assert len(reports) == HOSTS
    assert sum(len(r["gpus"]) for r in reports.values()) == HOSTS * GPUS_PER_HOST > 65_535
    last = reports[f"gpu{HOSTS - 1:05d}"]["gpus"][-1]
    assert [i["profile"] for i in last["mig"]["instances"]] == ["3g.40gb"]
    assert all("_gpu_id" not in g for r in reports.values() for g in r["gpus"])


def test_a_subset_of_hosts_reads_only_their_children(big_fleet):
    wanted = [f"gpu{HOSTS - 1:05d}", "gpu00000"]
    with big_fleet.connect() as connection:
        reports = read_reports(connection, wanted)
    assert sorted(reports) == sorted(wanted)
    assert [len(reports[h]["gpus"]) for h in wanted] == [GPUS_PER_HOST, GPUS_PER_HOST]
    assert len(reports[wanted[0]]["gpus"][-1]["mig"]["instances"]) == 1
    assert reports["gpu00000"]["gpus"][-1]["mig"]["instances"] == []
