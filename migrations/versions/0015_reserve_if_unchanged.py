"""The promise of an unchanged host as one PostgreSQL function.

``cortex_reserve_if_unchanged`` writes a Nova create's reservation on its host only if
the host's other unexpired reservations are the ones the call counted
(:meth:`cortex.store.reservations.ReservationStore.reserve_if_unchanged`): it takes
the host's transaction-level advisory lock (the key :meth:`ReservationStore.lock_host`
takes), turns ``synchronous_commit`` off for its transaction (a reservation is a
short-lived hint that Placement's claim backs), and then checks and writes. A volatile
PL/pgSQL function reads with a new snapshot for each statement, so the check sees every
reservation committed before the lock was granted. It returns the reservation's id
when it wrote, NULL when the host changed.

One statement instead of three in one simple query: PostgreSQL plans the function's
statements once per session and the caller's driver prepares the call, where the
simple query was parsed and planned on every Nova create.

PostgreSQL only: the embedded SQLite default serves one process and locks in Python.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27
"""

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

_SIGNATURE = ("cortex_reserve_if_unchanged(integer, varchar, varchar, varchar, varchar, "
              "jsonb, jsonb, timestamptz, timestamptz, timestamptz, varchar, varchar[])")


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("""
        CREATE FUNCTION cortex_reserve_if_unchanged(
            lock_namespace integer, new_id varchar, new_host varchar,
            new_instance varchar, new_group varchar, new_resources jsonb, new_gpus jsonb,
            new_created_at timestamptz, new_expires_at timestamptz,
            as_of timestamptz, own varchar, expected varchar[])
        RETURNS varchar
        LANGUAGE plpgsql VOLATILE AS $$
        DECLARE
            written varchar;
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
            INSERT INTO inflight_reservations
                (id, host, instance_uuid, group_id, resources, gpus, created_at, expires_at)
            VALUES (new_id, new_host, new_instance, new_group, new_resources, new_gpus,
                    new_created_at, new_expires_at)
            ON CONFLICT (instance_uuid) DO UPDATE SET
                id = excluded.id, host = excluded.host, group_id = excluded.group_id,
                resources = excluded.resources, gpus = excluded.gpus,
                created_at = excluded.created_at, expires_at = excluded.expires_at
            RETURNING id INTO written;
            RETURN written;
        END
        $$""")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"DROP FUNCTION IF EXISTS {_SIGNATURE}")
