"""Knowledge tables (compute nodes, inventories, aggregates, storage pools) and decisions.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

JSONType = sa.JSON().with_variant(JSONB(), "postgresql")
TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "knowledge_version",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("version", sa.BigInteger, nullable=False),
        sa.Column("updated_at", TZ, nullable=False),
    )
    op.execute("INSERT INTO knowledge_version (id, version, updated_at) "
               "VALUES (1, 0, CURRENT_TIMESTAMP)")
    op.create_table(
        "aggregates",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("uuid", sa.String(36), nullable=False, unique=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("availability_zone", sa.String(255)),
        sa.Column("metadata", JSONType, nullable=False),
    )
    op.create_table(
        "aggregate_hosts",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("aggregate_id", sa.Integer,
                  sa.ForeignKey("aggregates.id", ondelete="CASCADE"), nullable=False),
        sa.Column("host", sa.String(255), nullable=False, index=True),
        sa.UniqueConstraint("aggregate_id", "host"),
    )
    op.create_table(
        "compute_nodes",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("host", sa.String(255), nullable=False, index=True),
        sa.Column("node", sa.String(255), nullable=False),
        sa.Column("uuid", sa.String(36), nullable=False, unique=True),
        sa.Column("availability_zone", sa.String(255)),
        sa.Column("hypervisor_type", sa.String(255)),
        sa.Column("hypervisor_version", sa.BigInteger),
        sa.Column("cpu_arch", sa.String(32)),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("up", sa.Boolean, nullable=False),
        sa.Column("disabled_reason", sa.String(255)),
        sa.Column("traits", JSONType, nullable=False),
        sa.UniqueConstraint("host", "node"),
    )
    op.create_table(
        "resource_inventories",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("compute_node_id", sa.Integer,
                  sa.ForeignKey("compute_nodes.id", ondelete="CASCADE"), nullable=False),
        sa.Column("resource_class", sa.String(255), nullable=False),
        sa.Column("total", sa.BigInteger, nullable=False),
        sa.Column("reserved", sa.BigInteger, nullable=False),
        sa.Column("min_unit", sa.BigInteger, nullable=False),
        sa.Column("max_unit", sa.BigInteger, nullable=False),
        sa.Column("step_size", sa.BigInteger, nullable=False),
        sa.Column("allocation_ratio", sa.Float, nullable=False),
        sa.Column("used", sa.BigInteger, nullable=False),
        sa.UniqueConstraint("compute_node_id", "resource_class"),
    )
    op.create_table(
        "storage_pools",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("service", sa.String(16), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("availability_zone", sa.String(255)),
        sa.Column("total_capacity_gb", sa.Float, nullable=False),
        sa.Column("free_capacity_gb", sa.Float, nullable=False),
        sa.Column("allocated_capacity_gb", sa.Float, nullable=False),
        sa.Column("provisioned_capacity_gb", sa.Float, nullable=False),
        sa.Column("reserved_percentage", sa.Float, nullable=False),
        sa.Column("max_over_subscription_ratio", sa.Float, nullable=False),
        sa.Column("thin_provisioning_support", sa.Boolean, nullable=False),
        sa.Column("thick_provisioning_support", sa.Boolean, nullable=False),
        sa.Column("capabilities", JSONType, nullable=False),
        sa.UniqueConstraint("service", "name"),
    )
    op.create_table(
        "decisions",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("created_at", TZ, nullable=False, index=True),
        sa.Column("service", sa.String(16), nullable=False),
        sa.Column("pipeline", sa.String(255)),
        sa.Column("request_id", sa.String(255), index=True),
        sa.Column("global_request_id", sa.String(255)),
        sa.Column("resource_id", sa.String(255), index=True),
        sa.Column("intent", sa.String(32)),
        sa.Column("outcome", sa.String(32), nullable=False),
        sa.Column("duration_ms", sa.Float, nullable=False),
        sa.Column("record", JSONType, nullable=False),
    )


def downgrade() -> None:
    for table in ("decisions", "storage_pools", "resource_inventories", "compute_nodes",
                  "aggregate_hosts", "aggregates", "knowledge_version"):
        op.drop_table(table)
