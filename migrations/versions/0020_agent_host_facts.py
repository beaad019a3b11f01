"""Agent reports keep the host's CPU facts and IP for nodes whose hypervisor hides them.

``host_topologies.cpu_info`` (JSON object: ``arch``, ``vendor``, ``topology``,
``maxphysaddr`` as cortex-agent reads them from the kernel; ``{}`` when not reported)
and ``host_topologies.host_ip`` (Nova's ``my_ip``; nullable). The knowledge view fills
a node's ``cpu_info``/``host_ip`` from them where the sync has none (Nova's hypervisor
API hides ``cpu_info`` from microversion 2.88).

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

JSONType = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("host_topologies") as batch:
        batch.add_column(sa.Column("cpu_info", JSONType, nullable=False,
                                   server_default=sa.text("'{}'")))
        batch.add_column(sa.Column("host_ip", sa.String(64)))


def downgrade() -> None:
    with op.batch_alter_table("host_topologies") as batch:
        batch.drop_column("host_ip")
        batch.drop_column("cpu_info")
