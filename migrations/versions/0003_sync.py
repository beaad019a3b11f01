"""Synced tables: Nova, Placement, Keystone, Prometheus snapshots, host features, sync status.

Revision ID: 0003
Revises: 0004
Create Date: 2026-11-21
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0003"
down_revision = "0004"
branch_labels = None
depends_on = None

JSONType = sa.JSON().with_variant(JSONB(), "postgresql")
TZ = sa.DateTime(timezone=True)


def _provider_fk():
    return sa.ForeignKey("resource_providers.uuid", ondelete="CASCADE")


def upgrade() -> None:
    op.create_table(
        "hypervisors",
        sa.Column("uuid", sa.String(36), primary_key=True),
        sa.Column("node", sa.String(255), nullable=False),
        sa.Column("host", sa.String(255), nullable=False, index=True),
        sa.Column("service_id", sa.String(36)),
        sa.Column("state", sa.String(16)),
        sa.Column("status", sa.String(16)),
        sa.Column("disabled_reason", sa.String(255)),
        sa.Column("forced_down", sa.Boolean, nullable=False),
        sa.Column("zone", sa.String(255)),
        sa.Column("hypervisor_type", sa.String(255)),
        sa.Column("hypervisor_version", sa.BigInteger),
        sa.Column("host_ip", sa.String(64)),
        sa.Column("cpu_arch", sa.String(32)),
        sa.Column("cpu_features", JSONType, nullable=False),
    )
    op.create_table(
        "servers",
        sa.Column("uuid", sa.String(36), primary_key=True),
        sa.Column("name", sa.String(255)),
        sa.Column("host", sa.String(255), index=True),
        sa.Column("node", sa.String(255)),
        sa.Column("status", sa.String(32)),
        sa.Column("vm_state", sa.String(32)),
        sa.Column("task_state", sa.String(64)),
        sa.Column("project_id", sa.String(255), index=True),
        sa.Column("user_id", sa.String(255)),
        sa.Column("availability_zone", sa.String(255)),
        sa.Column("flavor_name", sa.String(255)),
        sa.Column("flavor", JSONType, nullable=False),
        sa.Column("created_at", TZ),
    )
    op.create_table(
        "flavors",
        sa.Column("id", sa.String(255), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("vcpus", sa.Integer, nullable=False),
        sa.Column("ram", sa.BigInteger, nullable=False),
        sa.Column("disk", sa.BigInteger, nullable=False),
        sa.Column("ephemeral", sa.BigInteger, nullable=False),
        sa.Column("swap", sa.BigInteger, nullable=False),
        sa.Column("is_public", sa.Boolean, nullable=False),
        sa.Column("is_disabled", sa.Boolean, nullable=False),
        sa.Column("description", sa.Text),
        sa.Column("extra_specs", JSONType, nullable=False),
    )
    op.create_table(
        "server_groups",
        sa.Column("uuid", sa.String(36), primary_key=True),
        sa.Column("name", sa.String(255)),
        sa.Column("policy", sa.String(64)),
        sa.Column("rules", JSONType, nullable=False),
        sa.Column("members", JSONType, nullable=False),
        sa.Column("project_id", sa.String(255)),
        sa.Column("user_id", sa.String(255)),
    )
    op.create_table(
        "server_migrations",
        sa.Column("uuid", sa.String(36), primary_key=True),
        sa.Column("server_uuid", sa.String(36), index=True),
        sa.Column("migration_type", sa.String(32)),
        sa.Column("status", sa.String(32)),
        sa.Column("source_compute", sa.String(255)),
        sa.Column("source_node", sa.String(255)),
        sa.Column("dest_compute", sa.String(255)),
        sa.Column("dest_node", sa.String(255)),
        sa.Column("old_flavor_id", sa.String(255)),
        sa.Column("new_flavor_id", sa.String(255)),
        sa.Column("project_id", sa.String(255)),
        sa.Column("created_at", TZ),
        sa.Column("updated_at", TZ),
    )
    op.create_table(
        "resource_providers",
        sa.Column("uuid", sa.String(36), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("generation", sa.BigInteger, nullable=False),
        sa.Column("root_provider_uuid", sa.String(36), nullable=False, index=True),
        sa.Column("parent_provider_uuid", sa.String(36)),
    )
    op.create_table(
        "provider_inventories",
        sa.Column("provider_uuid", sa.String(36), _provider_fk(), primary_key=True),
        sa.Column("resource_class", sa.String(255), primary_key=True),
        sa.Column("total", sa.BigInteger, nullable=False),
        sa.Column("reserved", sa.BigInteger, nullable=False),
        sa.Column("min_unit", sa.BigInteger, nullable=False),
        sa.Column("max_unit", sa.BigInteger, nullable=False),
        sa.Column("step_size", sa.BigInteger, nullable=False),
        sa.Column("allocation_ratio", sa.Float, nullable=False),
        sa.Column("used", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "provider_traits",
        sa.Column("provider_uuid", sa.String(36), _provider_fk(), primary_key=True),
        sa.Column("trait", sa.String(255), primary_key=True),
    )
    op.create_table(
        "provider_aggregates",
        sa.Column("provider_uuid", sa.String(36), _provider_fk(), primary_key=True),
        sa.Column("aggregate_uuid", sa.String(36), primary_key=True),
    )
    op.create_table(
        "domains",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("description", sa.Text),
    )
    op.create_table(
        "projects",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("domain_id", sa.String(64), index=True),
        sa.Column("parent_id", sa.String(64)),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("is_domain", sa.Boolean, nullable=False),
        sa.Column("description", sa.Text),
    )
    for name, ts_key in (("prometheus_samples", True), ("prometheus_latest", False)):
        op.create_table(
            name,
            sa.Column("feature", sa.String(255), primary_key=True),
            sa.Column("host", sa.String(255), primary_key=True),
            sa.Column("series", sa.String(1024), primary_key=True),
            sa.Column("ts", TZ, primary_key=ts_key, nullable=False),
            sa.Column("value", sa.Float, nullable=False),
        )
    op.create_table(
        "host_features",
        sa.Column("host", sa.String(255), primary_key=True),
        sa.Column("feature", sa.String(255), primary_key=True),
        sa.Column("source", sa.String(32), nullable=False, index=True),
        sa.Column("value", sa.Float, nullable=False),
        sa.Column("unit", sa.String(32), nullable=False),
        sa.Column("observed_at", TZ),
    )
    op.create_table(
        "sync_status",
        sa.Column("source", sa.String(32), primary_key=True),
        sa.Column("last_attempt_at", TZ),
        sa.Column("last_success_at", TZ),
        sa.Column("last_error_at", TZ),
        sa.Column("last_error", sa.String(2048)),
        sa.Column("consecutive_failures", sa.Integer, nullable=False),
        sa.Column("duration_seconds", sa.Float),
        sa.Column("rows", sa.BigInteger, nullable=False),
        sa.Column("changed", sa.BigInteger, nullable=False),
        sa.Column("owner", sa.String(255)),
        sa.Column("detail", JSONType, nullable=False),
    )


def downgrade() -> None:
    for table in ("sync_status", "host_features", "prometheus_latest", "prometheus_samples",
                  "projects", "domains", "provider_aggregates", "provider_traits",
                  "provider_inventories", "resource_providers", "server_migrations",
                  "server_groups", "flavors", "servers", "hypervisors"):
        op.drop_table(table)
