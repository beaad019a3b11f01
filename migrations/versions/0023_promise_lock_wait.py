"""The promise's function takes how long it may wait for the host's lock.

``cortex_reserve_if_unchanged`` of migrations 0015 and 0022 waits for the host's
advisory lock as long as the connection's ``lock_timeout`` allows (2 s by default),
while the call that asks has only what is left of its own time budget; a wait that
outlasted it was ended by the client's watchdog, which shut the connection and marked
the database down for every call of the process, though the database answered and
only the host was busy (a group being promised on it). This overload takes
``lock_wait_ms`` more: above 0 it bounds the transaction's lock waits to that many
milliseconds (or the connection's own ``lock_timeout`` when shorter), so the server
refuses the lock (SQLSTATE 55P03) before the deadline; then it runs the promise of
revision 0022 unchanged. The twelve-argument function stays for processes of the
previous revision during an upgrade.

PostgreSQL only: the embedded SQLite default serves one process and has no such lock.

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-28
"""

from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

_BOUNDED = """
    CREATE OR REPLACE FUNCTION cortex_reserve_if_unchanged(
        lock_namespace integer, new_id varchar, new_host varchar,
        new_instance varchar, new_group varchar, new_resources jsonb, new_gpus jsonb,
        new_created_at timestamptz, new_expires_at timestamptz,
        as_of timestamptz, own varchar, expected varchar[], lock_wait_ms integer)
    RETURNS varchar
    LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
        configured numeric;
    BEGIN
        IF lock_wait_ms > 0 THEN
            configured := EXTRACT(EPOCH FROM CAST(current_setting('lock_timeout')
                                                  AS interval)) * 1000;
            PERFORM set_config('lock_timeout', CAST(CASE WHEN configured > 0
                THEN LEAST(configured, lock_wait_ms) ELSE lock_wait_ms END AS bigint)
                || 'ms', true);
        END IF;
        RETURN cortex_reserve_if_unchanged(
            lock_namespace, new_id, new_host, new_instance, new_group, new_resources,
            new_gpus, new_created_at, new_expires_at, as_of, own, expected);
    END
    $$"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(_BOUNDED)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP FUNCTION IF EXISTS cortex_reserve_if_unchanged(integer, varchar, "
               "varchar, varchar, varchar, jsonb, jsonb, timestamptz, timestamptz, "
               "timestamptz, varchar, varchar[], integer)")
