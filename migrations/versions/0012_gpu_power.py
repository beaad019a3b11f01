"""GPU power draw from the agents' reports.

``gpus.power_watts`` holds what NVML said a GPU drew when its host's cortex-agent
collected the report (``nvmlDeviceGetPowerUsage``, in watts); null when NVML could not
say or does not see the GPU (bound to vfio-pci), and for reports of older agents.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("gpus") as batch:  # batch: SQLite cannot drop a column
        batch.add_column(sa.Column("power_watts", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("gpus") as batch:
        batch.drop_column("power_watts")
