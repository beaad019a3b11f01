"""The descheduler: which instance holds a GPU or a hold, and the moves made.

``gpus.instance_uuid`` names the Nova instance holding a GPU passed through (the
agent's report, a fleet file); ``commitment_holds.instance_uuid`` the owner's instance
that took a committed hold (the hold follows it when Nova moves it);
``descheduler_moves`` records every move a
``cortex-descheduler`` run planned, proposed or made, with its reason, its target's
decision and how it ended (the cycle breaker reads it).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.add_column("gpus", sa.Column("instance_uuid", sa.String(36)))
    op.add_column("commitment_holds", sa.Column("instance_uuid", sa.String(36)))
    op.create_table(
        "descheduler_moves",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("run_id", sa.String(36), nullable=False, index=True),
        sa.Column("instance_uuid", sa.String(36), nullable=False, index=True),
        sa.Column("project_id", sa.String(255)),
        sa.Column("detector", sa.String(64), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("source_host", sa.String(255), nullable=False),
        sa.Column("target_host", sa.String(255)),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("detail", sa.Text, nullable=False, server_default=""),
        sa.Column("decision_id", sa.String(36)),
        sa.Column("gpus_won", sa.Integer, nullable=False, server_default="0"),
        sa.Column("created_at", TZ, nullable=False, index=True),
        sa.Column("finished_at", TZ),
    )


def downgrade() -> None:
    op.drop_table("descheduler_moves")
    with op.batch_alter_table("commitment_holds") as batch:
        batch.drop_column("instance_uuid")
    with op.batch_alter_table("gpus") as batch:
        batch.drop_column("instance_uuid")
