"""Host and pool facts the syncers fill: features, CPU flags, instances, migrations.

JSON columns on compute_nodes (``features``, ``cpu_features``, ``instances``,
``migrations``, ``allowed_projects``) and ``failed_builds``; ``features`` and
``resource_count`` on storage_pools. Every column has a server default, so rows
written before this revision (or by code that does not know the columns) stay valid.

Revision ID: 0004
Revises: 0002
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0004"
down_revision = "0002"
branch_labels = None
depends_on = None

JSONType = sa.JSON().with_variant(JSONB(), "postgresql")
EMPTY_OBJECT = sa.text("'{}'")
EMPTY_LIST = sa.text("'[]'")
NODE_COLUMNS = (
    ("features", JSONType, EMPTY_OBJECT),
    ("cpu_features", JSONType, EMPTY_LIST),
    ("instances", JSONType, EMPTY_LIST),
    ("migrations", JSONType, EMPTY_LIST),
    ("failed_builds", sa.Integer, sa.text("0")),
    ("allowed_projects", JSONType, EMPTY_LIST),
)
POOL_COLUMNS = (
    ("features", JSONType, EMPTY_OBJECT),
    ("resource_count", sa.Integer, sa.text("0")),
)


def upgrade() -> None:
    with op.batch_alter_table("compute_nodes") as batch:
        for name, kind, default in NODE_COLUMNS:
            batch.add_column(sa.Column(name, kind, nullable=False, server_default=default))
    with op.batch_alter_table("storage_pools") as batch:
        for name, kind, default in POOL_COLUMNS:
            batch.add_column(sa.Column(name, kind, nullable=False, server_default=default))


def downgrade() -> None:
    with op.batch_alter_table("storage_pools") as batch:
        for name, _, _ in reversed(POOL_COLUMNS):
            batch.drop_column(name)
    with op.batch_alter_table("compute_nodes") as batch:
        for name, _, _ in reversed(NODE_COLUMNS):
            batch.drop_column(name)
