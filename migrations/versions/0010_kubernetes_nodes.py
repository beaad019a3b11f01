"""Kubernetes nodes' labels, as kube-scheduler's extender calls send them.

``kubernetes_nodes`` keeps the labels of each node the extender was sent as a Node
object; the view gives a node its zone (``topology.kubernetes.io/zone``) and labels.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

JSONType = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "kubernetes_nodes",
        sa.Column("name", sa.String(253), primary_key=True),
        sa.Column("labels", JSONType, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("kubernetes_nodes")
