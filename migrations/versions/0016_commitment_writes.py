"""Commitments written once per client retry, and only with times every reader can hold.

``idempotency_key`` (unique; NULL for a commitment created without one) is the
``Idempotency-Key`` header of the POST that created the commitment, and
``request_digest`` the SHA-256 of that body: a retried POST with the same key and body
answers the stored commitment instead of placing a second one.

On PostgreSQL a CHECK keeps ``start_at`` and ``end_at`` between 1970-01-01 and the end
of 9999 (UTC): PostgreSQL holds years up to 294276 and before year 1, which Python's
datetime (and so every reader of the table) cannot. Added ``NOT VALID``: rows written
before it are not checked (the knowledge loader skips a row it cannot read), every new
or changed row is.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_CHECK = "ck_commitments_times_in_range"


def upgrade() -> None:
    op.add_column("commitments", sa.Column("idempotency_key", sa.String(255)))
    op.add_column("commitments", sa.Column("request_digest", sa.String(64)))
    op.create_index("ix_commitments_idempotency_key", "commitments", ["idempotency_key"],
                    unique=True)
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"""
            ALTER TABLE commitments ADD CONSTRAINT {_CHECK} CHECK (
                start_at >= TIMESTAMPTZ '1970-01-01 00:00:00+00'
                AND end_at < TIMESTAMPTZ '10000-01-01 00:00:00+00'
                AND start_at < end_at) NOT VALID""")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER TABLE commitments DROP CONSTRAINT {_CHECK}")
    op.drop_index("ix_commitments_idempotency_key", table_name="commitments")
    with op.batch_alter_table("commitments") as batch:
        batch.drop_column("request_digest")
        batch.drop_column("idempotency_key")
