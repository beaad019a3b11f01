"""Compress decision records with LZ4 where the PostgreSQL server has it.

A decision record is stored out of line (TOAST) and compressed. PostgreSQL's default
method, pglz, took about 10 ms of server time per 300 kB record of a 1,000-host call
(bench on PostgreSQL 15), on the same cores as the API workers; LZ4 (PostgreSQL 14+,
built ``--with-lz4``) takes about a third of that. Only rows written afterwards are
compressed with it; nothing is rewritten. Other databases, and servers without LZ4,
are left as they are.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-21
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_HAS_LZ4 = sa.text("SELECT 'lz4' = ANY(enumvals) FROM pg_settings "
                   "WHERE name = 'default_toast_compression'")


def _lz4_available() -> bool:
    """Whether this is a PostgreSQL server that can compress with LZ4."""
    bind = op.get_bind()
    return bind.dialect.name == "postgresql" and bool(bind.execute(_HAS_LZ4).scalar())


def upgrade() -> None:
    if _lz4_available():
        op.execute("ALTER TABLE decisions ALTER COLUMN record SET COMPRESSION lz4")


def downgrade() -> None:
    if _lz4_available():
        op.execute("ALTER TABLE decisions ALTER COLUMN record SET COMPRESSION default")
