"""Decisions keep why a call found no host, so a day's refusals count by cause.

``decisions.cause`` (nullable): the step that removed the last hosts of a call answered
with no host (:attr:`cortex.decision.Decision.refusal`), None for every other call.
The partial index ``ix_decisions_refusals`` on ``created_at`` holds the refusals
alone. Decisions written before this revision keep no cause.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("decisions") as batch:
        batch.add_column(sa.Column("cause", sa.String(255)))
    op.create_index("ix_decisions_refusals", "decisions", ["created_at"],
                    postgresql_where=sa.text("cause IS NOT NULL"),
                    sqlite_where=sa.text("cause IS NOT NULL"))


def downgrade() -> None:
    op.drop_index("ix_decisions_refusals", table_name="decisions")
    with op.batch_alter_table("decisions") as batch:
        batch.drop_column("cause")
