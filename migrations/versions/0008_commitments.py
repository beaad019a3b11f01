"""Committed reservations: capacity promised to a project for a period.

``commitments`` holds what was promised (project, zone, instance shape, count, period);
``commitment_holds`` the room each committed instance got on a host when the
commitment was placed through the pipelines.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

JSONType = sa.JSON().with_variant(JSONB(), "postgresql")
TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "commitments",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("project_id", sa.String(255), nullable=False, index=True),
        sa.Column("availability_zone", sa.String(255)),
        sa.Column("vcpus", sa.Integer, nullable=False),
        sa.Column("memory_mb", sa.Integer, nullable=False),
        sa.Column("gpus", sa.Integer, nullable=False),
        sa.Column("products", JSONType, nullable=False),
        sa.Column("count", sa.Integer, nullable=False),
        sa.Column("start_at", TZ, nullable=False),
        sa.Column("end_at", TZ, nullable=False),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("description", sa.String(255)),
    )
    op.create_table(
        "commitment_holds",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("commitment_id", sa.String(36),
                  sa.ForeignKey("commitments.id", ondelete="CASCADE"), nullable=False,
                  index=True),
        sa.Column("host", sa.String(255), nullable=False, index=True),
        sa.Column("resources", JSONType, nullable=False),
        sa.Column("gpus", JSONType, nullable=False),
        sa.Column("baseline", sa.Integer, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("commitment_holds")
    op.drop_table("commitments")
