"""Storage pools know their availability zone's id.

``storage_pools.availability_zone_id`` (nullable, 36 characters: Manila's
``availability_zones.id`` is a UUID) holds the id of the pool's zone next to its
name, as Manila's ``GET /availability-zones`` maps one to the other. Manila's
requests name their zone by this id, so filter_correct_az compares it. NULL where it
is not known: Cinder's pools, and pools written before this revision until the next
Manila sync.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("storage_pools", sa.Column("availability_zone_id", sa.String(36)))


def downgrade() -> None:
    op.drop_column("storage_pools", "availability_zone_id")
