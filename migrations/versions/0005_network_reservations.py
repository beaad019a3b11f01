"""Network topology domains and in-flight reservations.

``network_domains`` and ``network_locations`` hold the topology file (leaves, spines,
adjacency, uplink bandwidth, hosts per leaf); ``inflight_reservations`` holds what
Cortex promised until Placement's synced usage shows it or its TTL passes.

Revision ID: 0005
Revises: 0003
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0005"
down_revision = "0003"
branch_labels = None
depends_on = None

JSONType = sa.JSON().with_variant(JSONB(), "postgresql")
TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "network_domains",
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("spine", sa.String(255)),
        sa.Column("block", sa.String(255)),
        sa.Column("uplink_gbps", sa.Float),
        sa.Column("adjacent", JSONType),
        sa.Column("source", sa.String(32), nullable=False),
        sa.Column("updated_at", TZ, nullable=False),
    )
    op.create_table(
        "network_locations",
        sa.Column("host", sa.String(255), primary_key=True),
        sa.Column("leaf", sa.String(255),
                  sa.ForeignKey("network_domains.name", ondelete="CASCADE"), nullable=False,
                  index=True),
        sa.Column("source", sa.String(32), nullable=False),
        sa.Column("updated_at", TZ, nullable=False),
    )
    op.create_table(
        "inflight_reservations",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("host", sa.String(255), nullable=False, index=True),
        sa.Column("instance_uuid", sa.String(36), unique=True),
        sa.Column("group_id", sa.String(255), index=True),
        sa.Column("resources", JSONType, nullable=False),
        sa.Column("gpus", JSONType, nullable=False),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("expires_at", TZ, nullable=False, index=True),
    )


def downgrade() -> None:
    op.drop_table("inflight_reservations")
    op.drop_table("network_locations")
    op.drop_table("network_domains")
