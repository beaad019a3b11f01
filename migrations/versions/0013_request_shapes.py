"""Request shapes a fresh worker warms with.

``request_shapes`` keeps the bodies of the request shapes live calls brought (the
scheduler's own notion of a shape: what its steps' kept answers depend on), without
their candidate hosts and weights, with the last time a worker first saw each. A
gunicorn worker replays the newest ones as simulations before it serves, so the first
call of a flavor the cloud asks for finds its answers kept. Pruned to the newest
rows by the writer.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

JSONType = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "request_shapes",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("service", sa.String(16), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("body", JSONType, nullable=False),
    )
    op.create_index("ix_request_shapes_last_seen", "request_shapes", ["last_seen"])


def downgrade() -> None:
    op.drop_index("ix_request_shapes_last_seen", "request_shapes")
    op.drop_table("request_shapes")
