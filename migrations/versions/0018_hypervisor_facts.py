"""Compute nodes keep the hypervisor facts Nova's capability and image filters read.

``compute_nodes.cpu_info`` (JSON object, Nova's ``cpu_info`` as the hypervisor API or
cortex-agent gives it: ``arch``, ``vendor``, ``model``, ``topology``, ``features`` in
the reported order, ``maxphysaddr``; ``{}`` when unknown), ``compute_nodes.host_ip``
(nullable) and ``compute_nodes.supported_instances`` (JSON list of ``[arch, hv_type,
vm_mode]``, NULL when not reported: readers derive it from the architecture and the
hypervisor type). ``hypervisors.cpu_info`` keeps the whole ``cpu_info`` the hypervisor
API returned (``{}`` when it returned none). Rows written before this revision get the
defaults.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

JSONType = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("compute_nodes") as batch:
        batch.add_column(sa.Column("cpu_info", JSONType, nullable=False,
                                   server_default=sa.text("'{}'")))
        batch.add_column(sa.Column("host_ip", sa.String(64)))
        batch.add_column(sa.Column("supported_instances", JSONType))
    with op.batch_alter_table("hypervisors") as batch:
        batch.add_column(sa.Column("cpu_info", JSONType, nullable=False,
                                   server_default=sa.text("'{}'")))


def downgrade() -> None:
    with op.batch_alter_table("hypervisors") as batch:
        batch.drop_column("cpu_info")
    with op.batch_alter_table("compute_nodes") as batch:
        batch.drop_column("supported_instances")
        batch.drop_column("host_ip")
        batch.drop_column("cpu_info")
