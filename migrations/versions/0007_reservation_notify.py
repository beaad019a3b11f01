"""Announce every change of in-flight reservations on a NOTIFY channel.

Every API worker keeps the unexpired reservations in memory
(:mod:`cortex.knowledge.reservation_feed`) instead of reading them on every Nova call.
A row-level trigger on ``inflight_reservations`` sends ``NOTIFY cortex_reservations``
with the change, whoever makes it (a promise, ``cortex-manage reservations prune``, an
operator's own SQL): ``{"op", "old", "old_expires_at", "row"}``, ``old`` the id of a
row updated or deleted, ``row`` the new row (``row_to_json``). ``TRUNCATE``, and a row
too large for a notification (8,000 bytes), announce ``{"op": "reload"}`` instead.
PostgreSQL delivers notifications when the transaction commits, in commit order.
PostgreSQL only: the embedded SQLite default serves one process and reads the table.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-21
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

#: The channel cortex.knowledge.reservation_feed listens on.
CHANNEL = "cortex_reservations"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"""
        CREATE FUNCTION cortex_reservations_changed() RETURNS trigger
        LANGUAGE plpgsql AS $$
        DECLARE
            payload text := '{{"op": "reload"}}';
        BEGIN
            IF TG_OP <> 'TRUNCATE' THEN
                payload := json_build_object(
                    'op', lower(TG_OP),
                    'old', CASE WHEN TG_OP <> 'INSERT' THEN OLD.id END,
                    'old_expires_at', CASE WHEN TG_OP <> 'INSERT' THEN OLD.expires_at END,
                    'row', CASE WHEN TG_OP <> 'DELETE' THEN row_to_json(NEW) END)::text;
                IF octet_length(payload) > 7900 THEN
                    payload := '{{"op": "reload"}}';
                END IF;
            END IF;
            PERFORM pg_notify('{CHANNEL}', payload);
            RETURN NULL;
        END
        $$""")
    op.execute("CREATE TRIGGER inflight_reservations_notify "
               "AFTER INSERT OR UPDATE OR DELETE ON inflight_reservations "
               "FOR EACH ROW EXECUTE FUNCTION cortex_reservations_changed()")
    op.execute("CREATE TRIGGER inflight_reservations_notify_truncate "
               "AFTER TRUNCATE ON inflight_reservations "
               "FOR EACH STATEMENT EXECUTE FUNCTION cortex_reservations_changed()")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER IF EXISTS inflight_reservations_notify_truncate "
               "ON inflight_reservations")
    op.execute("DROP TRIGGER IF EXISTS inflight_reservations_notify ON inflight_reservations")
    op.execute("DROP FUNCTION IF EXISTS cortex_reservations_changed()")
