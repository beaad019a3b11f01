"""GPU demand and its forecasts.

``gpu_demand`` keeps one row per live scheduling decision that asked for GPUs (whole
GPUs or vGPUs): when, which GPU model, flavor and availability zone, how many, placed
or refused, where, and the power the placement was expected to add. It outlives the
decision log (its own retention), since a forecast with weekly seasonality needs
weeks of history. ``gpu_forecasts`` holds the latest forecast per GPU model and
availability zone, replaced whole by each computation.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

JSONType = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "gpu_demand",
        sa.Column("decision_id", sa.String(36), primary_key=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("service", sa.String(16), nullable=False),
        sa.Column("model", sa.String(255), nullable=False),
        sa.Column("flavor", sa.String(255)),
        sa.Column("availability_zone", sa.String(255)),
        sa.Column("gpus", sa.Integer, nullable=False),
        sa.Column("vgpus", sa.Integer, nullable=False),
        sa.Column("instances", sa.Integer, nullable=False, server_default="1"),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("host", sa.String(255)),
        sa.Column("power_delta_watts", sa.Float),
    )
    op.create_index("ix_gpu_demand_created_at", "gpu_demand", ["created_at"])
    op.create_table(
        "gpu_forecasts",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("computed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("model", sa.String(255), nullable=False),
        sa.Column("availability_zone", sa.String(255)),
        sa.Column("flavor_family", sa.String(255)),
        sa.Column("horizon_hours", sa.Integer, nullable=False),
        sa.Column("supply_gpus", sa.Integer),
        sa.Column("used_gpus", sa.Integer),
        sa.Column("days_to_exhaustion", sa.Float),
        sa.Column("days_to_exhaustion_pessimistic", sa.Float),
        sa.Column("method", sa.String(128), nullable=False),
        sa.Column("document", JSONType, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("gpu_forecasts")
    op.drop_index("ix_gpu_demand_created_at", table_name="gpu_demand")
    op.drop_table("gpu_demand")
