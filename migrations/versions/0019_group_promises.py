"""Group promises: a gang's room held whole at its first member's call.

``group_promises`` has one row per group being placed (``id``: the group's key, e.g.
``request:<request id>`` of a Nova multi-create), with ``service``, the ``members``
asked, the ``placed`` members promised, ``min_count``, the promised ``hosts`` (JSON
list, member order), the ``reservations`` (JSON list of ``inflight_reservations``
ids, member order) and its ``created_at``/``expires_at`` (the reservations'
time-to-live). The members' room itself is in ``inflight_reservations``; a slot not
taken by a member yet has no ``instance_uuid``.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

JSONType = sa.JSON().with_variant(JSONB(), "postgresql")

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "group_promises",
        sa.Column("id", sa.String(255), primary_key=True),
        sa.Column("service", sa.String(32), nullable=False),
        sa.Column("members", sa.Integer, nullable=False),
        sa.Column("placed", sa.Integer, nullable=False),
        sa.Column("min_count", sa.Integer, nullable=False),
        sa.Column("hosts", JSONType, nullable=False),
        sa.Column("reservations", JSONType, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False, index=True),
    )


def downgrade() -> None:
    op.drop_table("group_promises")
