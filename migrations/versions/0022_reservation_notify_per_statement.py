"""Announce reservation changes per statement, and the promise announces its own row.

Migration 0007's row-level trigger ran a PL/pgSQL function for every row written to
``inflight_reservations``, a Nova create's promise included, to build its notification
from ``row_to_json``. Here the promise's function (:data:`_PROMISE`,
``cortex_reserve_if_unchanged``) sends its own notification, built from its arguments,
and the table's triggers are statement-level: one call per statement, with the rows it
inserted, updated or deleted in transition tables, one notification per row in the same
format as before (``{"op", "old", "old_expires_at", "row"}``; ``{"op": "reload"}`` for a
row too large to announce or a ``TRUNCATE``). The promise marks its own write with the
transaction-local setting ``cortex.announced``, which the triggers' ``WHEN`` reads, so
no trigger function runs on the promise's path; any other writer (a group promise,
``cortex-manage reservations prune``, the sync, an operator's SQL) is announced by the
triggers as before. Listeners (:mod:`cortex.store.reservation_feed`) see the same
payloads on the same channel, still delivered at commit in commit order; the insert
trigger keeps the name they look for.

An ``INSERT ... ON CONFLICT DO UPDATE`` fires both the insert and the update statement
trigger; each announces only the rows its transition tables hold. An update's old and
new rows are paired by ``id``; a row whose ``id`` changed is announced as the old row
gone and the new one written.

PostgreSQL only: the embedded SQLite default serves one process and reads the table.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-28
"""

from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

#: The channel cortex.store.reservation_feed listens on.
CHANNEL = "cortex_reservations"
#: The transaction-local setting the promise sets while its own row is written.
ANNOUNCED = "cortex.announced"
_RELOAD = '{"op": "reload"}'

_ANNOUNCE_STATEMENT = f"""
    CREATE FUNCTION cortex_reservations_statement() RETURNS trigger
    LANGUAGE plpgsql AS $$
    DECLARE
        payload text;
    BEGIN
        IF TG_OP = 'INSERT' THEN
            FOR payload IN
                SELECT json_build_object('op', 'insert', 'old', NULL, 'old_expires_at', NULL,
                                         'row', row_to_json(n))::text
                FROM added n
            LOOP
                PERFORM pg_notify('{CHANNEL}', CASE WHEN octet_length(payload) > 7900
                                                    THEN '{_RELOAD}' ELSE payload END);
            END LOOP;
        ELSIF TG_OP = 'UPDATE' THEN
            FOR payload IN
                SELECT json_build_object('op', 'update', 'old', o.id,
                                         'old_expires_at', o.expires_at,
                                         'row', CASE WHEN n.id IS NOT NULL
                                                     THEN row_to_json(n) END)::text
                FROM removed o FULL JOIN added n ON n.id = o.id
                ORDER BY n.id IS NOT NULL  -- a row gone before one written
            LOOP
                PERFORM pg_notify('{CHANNEL}', CASE WHEN octet_length(payload) > 7900
                                                    THEN '{_RELOAD}' ELSE payload END);
            END LOOP;
        ELSE
            FOR payload IN
                SELECT json_build_object('op', 'delete', 'old', o.id,
                                         'old_expires_at', o.expires_at, 'row', NULL)::text
                FROM removed o
            LOOP
                PERFORM pg_notify('{CHANNEL}', payload);
            END LOOP;
        END IF;
        RETURN NULL;
    END
    $$"""

#: The triggers (insert, update, delete), skipped for the promise's own row.
_TRIGGERS = (
    ("inflight_reservations_notify", "INSERT", "NEW TABLE AS added"),
    ("inflight_reservations_notify_update", "UPDATE", "OLD TABLE AS removed NEW TABLE AS added"),
    ("inflight_reservations_notify_delete", "DELETE", "OLD TABLE AS removed"),
)
_WHEN = f"current_setting('{ANNOUNCED}', true) IS DISTINCT FROM 'on'"

#: ``cortex_reserve_if_unchanged`` of migration 0015, its write in ``{write}``.
_PROMISE_TEMPLATE = """
    CREATE OR REPLACE FUNCTION cortex_reserve_if_unchanged(
        lock_namespace integer, new_id varchar, new_host varchar,
        new_instance varchar, new_group varchar, new_resources jsonb, new_gpus jsonb,
        new_created_at timestamptz, new_expires_at timestamptz,
        as_of timestamptz, own varchar, expected varchar[])
    RETURNS varchar
    LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
        written varchar;
        replaced boolean;
        payload text;
    BEGIN
        PERFORM pg_advisory_xact_lock(lock_namespace, hashtext(new_host));
        PERFORM set_config('synchronous_commit', 'off', true);
        -- the host's other unexpired reservations must be exactly the expected ids
        IF EXISTS (SELECT 1 FROM inflight_reservations r
                   WHERE r.host = new_host AND r.expires_at > as_of
                     AND (own IS NULL OR r.instance_uuid IS DISTINCT FROM own)
                     AND NOT (r.id = ANY (expected)))
           OR (SELECT count(*) FROM inflight_reservations r
               WHERE r.host = new_host AND r.expires_at > as_of
                 AND (own IS NULL OR r.instance_uuid IS DISTINCT FROM own)
                 AND r.id = ANY (expected)) <> cardinality(expected) THEN
            RETURN NULL;
        END IF;
{write}
        RETURN written;
    END
    $$"""

_UPSERT = """
        INSERT INTO inflight_reservations
            (id, host, instance_uuid, group_id, resources, gpus, created_at, expires_at)
        VALUES (new_id, new_host, new_instance, new_group, new_resources, new_gpus,
                new_created_at, new_expires_at)
        ON CONFLICT (instance_uuid) DO UPDATE SET
            id = excluded.id, host = excluded.host, group_id = excluded.group_id,
            resources = excluded.resources, gpus = excluded.gpus,
            created_at = excluded.created_at, expires_at = excluded.expires_at"""

#: The write that announces itself: the triggers skip it (``cortex.announced``), and
#: one notification carries the row as the triggers would write it (``xmax`` is set on
#: the row an ``ON CONFLICT`` updated).
_ANNOUNCED_WRITE = f"""
        PERFORM set_config('{ANNOUNCED}', 'on', true);
{_UPSERT}
        RETURNING id, xmax <> 0 INTO written, replaced;
        PERFORM set_config('{ANNOUNCED}', '', true);
        payload := json_build_object(
            'op', CASE WHEN replaced THEN 'update' ELSE 'insert' END,
            'old', NULL, 'old_expires_at', NULL,
            'row', json_build_object(
                'id', new_id, 'host', new_host, 'instance_uuid', new_instance,
                'group_id', new_group, 'resources', new_resources, 'gpus', new_gpus,
                'created_at', new_created_at, 'expires_at', new_expires_at))::text;
        PERFORM pg_notify('{CHANNEL}', CASE WHEN octet_length(payload) > 7900
                                            THEN '{_RELOAD}' ELSE payload END);"""

#: The promise as this revision writes it.
_PROMISE = _PROMISE_TEMPLATE.format(write=_ANNOUNCED_WRITE)


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER IF EXISTS inflight_reservations_notify ON inflight_reservations")
    op.execute(_ANNOUNCE_STATEMENT)
    for name, event, tables in _TRIGGERS:
        op.execute(f"CREATE TRIGGER {name} AFTER {event} ON inflight_reservations "
                   f"REFERENCING {tables} FOR EACH STATEMENT WHEN ({_WHEN}) "
                   "EXECUTE FUNCTION cortex_reservations_statement()")
    op.execute(_PROMISE)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(_PROMISE_TEMPLATE.format(write=_UPSERT + "\n        RETURNING id INTO written;"))
    for name, _event, _tables in _TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS {name} ON inflight_reservations")
    op.execute("DROP FUNCTION IF EXISTS cortex_reservations_statement()")
    op.execute("CREATE TRIGGER inflight_reservations_notify "
               "AFTER INSERT OR UPDATE OR DELETE ON inflight_reservations "
               "FOR EACH ROW EXECUTE FUNCTION cortex_reservations_changed()")
