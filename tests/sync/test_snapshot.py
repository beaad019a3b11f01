"""Snapshot writes on PostgreSQL: COPY and executemany write the same rows and counts."""

from __future__ import annotations

import copy
import uuid
from datetime import UTC, datetime

import pytest
from sqlalchemy import make_url, select, text

from cortex.db import models
from cortex.db.engine import make_engine
from cortex.sync import snapshot
from cortex.sync.snapshot import replace_rows


def servers(count):
    """``count`` Nova server rows; their flavors hold an integer beyond 64 bits."""
    return [{"uuid": f"00000000-0000-0000-0000-{i:012d}", "name": f"vm-{i}",
             "host": f"cmp{i % 40:03d}", "node": f"cmp{i % 40:03d}.example", "status": "ACTIVE",
             "vm_state": "active", "task_state": None, "project_id": "p1", "user_id": "u1",
             "availability_zone": "az-1", "flavor_name": "g1",
             "flavor": {"vcpus": 8, "ram": 65536, "id": 2**70 + i,
                        "extra_specs": {"hw:cpu_policy": "dedicated"}},
             "created_at": datetime(2026, 1, 1, tzinfo=UTC)} for i in range(count)]


def stored(engine):
    with engine.connect() as c:
        return {r.uuid: (r.name, r.flavor, r.created_at)
                for r in c.execute(select(models.Server.__table__))}


@pytest.fixture
def copies(monkeypatch):
    """The batches that went by COPY (their sizes)."""
    sizes = []
    real = snapshot._upsert_by_copy

    def spy(connection, table, staging, rows, key):
        sizes.append(len(rows))
        return real(connection, table, staging, rows, key)

    monkeypatch.setattr(snapshot, "_upsert_by_copy", spy)
    return sizes


@pytest.mark.parametrize("by_copy", [True, False])
def test_copy_and_executemany_write_the_same_rows_and_counts(sync_engine, copies, monkeypatch,
                                                             by_copy):
    if not by_copy:
        monkeypatch.setattr(snapshot, "COPY_MIN_ROWS", 10**9)
    rows = servers(2500)
    with sync_engine.begin() as c:
        first = replace_rows(c, models.Server, rows, ("uuid",), batch_size=1000)
    changed = copy.deepcopy(rows[:2000])
    changed[5]["name"] = "renamed"
    changed[9]["flavor"]["vcpus"] = 16
    with sync_engine.begin() as c:           # a second transaction: a new staging table
        second = replace_rows(c, models.Server, changed, ("uuid",), batch_size=1000)
    assert (first.rows, first.upserted, first.deleted) == (2500, 2500, 0)
    assert (second.rows, second.upserted, second.deleted) == (2000, 2, 500)
    assert copies == ([1000, 1000, 500, 1000, 1000] if by_copy else [])
    table = stored(sync_engine)
    assert table == {r["uuid"]: (r["name"], r["flavor"], r["created_at"]) for r in changed}
    assert table[rows[3]["uuid"]][1]["id"] == 2**70 + 3


def test_a_failed_copy_transaction_leaves_the_table_as_it_was(sync_engine, copies):
    rows = servers(300)
    with sync_engine.begin() as c:
        replace_rows(c, models.Server, rows, ("uuid",))
    before = stored(sync_engine)
    renamed = [dict(r, name="lost") for r in rows]
    with pytest.raises(RuntimeError), sync_engine.begin() as c:
        replace_rows(c, models.Server, renamed, ("uuid",))
        raise RuntimeError("the API went away")
    assert stored(sync_engine) == before and copies == [300, 300]
    with sync_engine.begin() as c:           # the staging table went with the rollback
        again = replace_rows(c, models.Server, renamed, ("uuid",))
    assert again.upserted == 300 and {v[0] for v in stored(sync_engine).values()} == {"lost"}


def test_rows_leaving_out_a_column_with_a_python_default_take_the_default(sync_engine, copies):
    rows = [{k: v for k, v in row.items() if k != "flavor"} for row in servers(200)]
    with sync_engine.begin() as c:
        counts = replace_rows(c, models.Server, rows, ("uuid",))
    assert counts.upserted == 200 and copies == []        # COPY would apply no default
    assert all(flavor == {} for _, flavor, _ in stored(sync_engine).values())


def test_a_role_that_may_not_create_temporary_tables_writes_by_executemany(
        sync_engine, sync_database_url, copies, caplog):
    url = make_url(sync_database_url)
    role = f"cortex_no_temp_{uuid.uuid4().hex[:8]}"
    with sync_engine.begin() as c:
        c.execute(text(f'CREATE ROLE {role} LOGIN'))
        c.execute(text(f'REVOKE TEMPORARY ON DATABASE "{url.database}" FROM PUBLIC'))
        c.execute(text(f"GRANT USAGE ON SCHEMA public TO {role}"))
        c.execute(text(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}"))
    limited = make_engine(url.set(username=role).render_as_string(hide_password=False))
    try:
        for name in ("first", "second"):                  # the refusal is remembered
            with limited.begin() as c:
                counts = replace_rows(c, models.Server, [dict(r, name=name)
                                                         for r in servers(300)], ("uuid",))
            assert counts.upserted == 300
    finally:
        limited.dispose()
        with sync_engine.begin() as c:
            c.execute(text(f'GRANT TEMPORARY ON DATABASE "{url.database}" TO PUBLIC'))
            c.execute(text(f"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {role}"))
            c.execute(text(f"REVOKE USAGE ON SCHEMA public FROM {role}"))
            c.execute(text(f"DROP ROLE {role}"))
    assert copies == [] and {v[0] for v in stored(sync_engine).values()} == {"second"}
    refusals = [r for r in caplog.records if "may not create temporary tables" in r.message]
    assert len(refusals) == 1
