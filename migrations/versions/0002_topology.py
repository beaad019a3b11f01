"""Topology tables: host topology reports, NUMA cells, GPUs, GPU links, MIG instances.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

JSONType = sa.JSON().with_variant(JSONB(), "postgresql")
TZ = sa.DateTime(timezone=True)


def _parent():
    return sa.Column("host_topology_id", sa.Integer,
                     sa.ForeignKey("host_topologies.id", ondelete="CASCADE"), nullable=False)


def upgrade() -> None:
    op.create_table(
        "host_topologies",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("host", sa.String(255), nullable=False, unique=True),
        sa.Column("reported_at", TZ, nullable=False),
        sa.Column("collected_at", sa.String(64)),
        sa.Column("agent_version", sa.String(64)),
        sa.Column("driver_version", sa.String(64)),
        sa.Column("cuda_driver_version", sa.String(32)),
        sa.Column("nvml_error", sa.Text),
        sa.Column("guests", sa.Integer),
        sa.Column("nics", JSONType, nullable=False),
    )
    op.create_table(
        "numa_cells",
        sa.Column("id", sa.Integer, primary_key=True),
        _parent(),
        sa.Column("cell_id", sa.Integer, nullable=False),
        sa.Column("socket", sa.Integer),
        sa.Column("cpus", sa.Text, nullable=False),
        sa.Column("dedicated_cpus", sa.Text, nullable=False),
        sa.Column("shared_cpus", sa.Text, nullable=False),
        sa.Column("siblings", JSONType, nullable=False),
        sa.Column("memory_mb", sa.BigInteger, nullable=False),
        sa.Column("memory_usage_mb", sa.BigInteger, nullable=False),
        sa.Column("cpu_usage", sa.Integer, nullable=False),
        sa.Column("pinned_cpus", sa.Text, nullable=False),
        sa.Column("mempages", JSONType, nullable=False),
        sa.Column("distances", JSONType, nullable=False),
        sa.UniqueConstraint("host_topology_id", "cell_id"),
    )
    op.create_table(
        "gpus",
        sa.Column("id", sa.Integer, primary_key=True),
        _parent(),
        sa.Column("pci_address", sa.String(32), nullable=False),
        sa.Column("gpu_index", sa.Integer),
        sa.Column("uuid", sa.String(64)),
        sa.Column("name", sa.String(255)),
        sa.Column("vendor_id", sa.String(4), nullable=False),
        sa.Column("device_id", sa.String(4)),
        sa.Column("dev_type", sa.String(16), nullable=False),
        sa.Column("driver", sa.String(64)),
        sa.Column("memory_mb", sa.BigInteger),
        sa.Column("numa_node", sa.Integer),
        sa.Column("numa_source", sa.String(32)),
        sa.Column("pci_numa_node", sa.Integer),
        sa.Column("cpu_affinity", sa.Text),
        sa.Column("mig_mode", sa.String(16)),
        sa.Column("mig_pending", sa.String(16)),
        sa.Column("virtualization_mode", sa.String(16)),
        sa.Column("compute_capability", sa.String(8)),
        sa.Column("healthy", sa.Boolean, nullable=False),
        sa.Column("health_reasons", JSONType, nullable=False),
        sa.Column("in_use", sa.Boolean, nullable=False),
        sa.Column("in_use_source", sa.String(16)),
        sa.Column("vgpus_in_use", sa.Integer, nullable=False),
        sa.Column("fabric_clique", sa.BigInteger),
        sa.Column("fabric_cluster", sa.String(36)),
        sa.Column("unsupported", JSONType, nullable=False),
        sa.UniqueConstraint("host_topology_id", "pci_address"),
    )
    op.create_table(
        "gpu_links",
        sa.Column("id", sa.Integer, primary_key=True),
        _parent(),
        sa.Column("gpu_a", sa.String(32), nullable=False),
        sa.Column("gpu_b", sa.String(32), nullable=False),
        sa.Column("nvlink", sa.Integer, nullable=False),
        sa.Column("p2p_nvlink", sa.String(32)),
        sa.Column("topology_level", sa.String(16)),
        sa.UniqueConstraint("host_topology_id", "gpu_a", "gpu_b"),
    )
    op.create_table(
        "mig_instances",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("gpu_id", sa.Integer, sa.ForeignKey("gpus.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("instance_id", sa.Integer, nullable=False),
        sa.Column("profile_id", sa.Integer, nullable=False),
        sa.Column("profile", sa.String(32), nullable=False),
        sa.Column("placement_start", sa.Integer, nullable=False),
        sa.Column("placement_size", sa.Integer, nullable=False),
        sa.Column("memory_mb", sa.BigInteger, nullable=False),
        sa.Column("in_use", sa.Boolean, nullable=False),
        sa.UniqueConstraint("gpu_id", "instance_id"),
    )


def downgrade() -> None:
    for table in ("mig_instances", "gpu_links", "gpus", "numa_cells", "host_topologies"):
        op.drop_table(table)
