"""Decision records as ``json``, not ``jsonb``, on PostgreSQL.

A decision record is written whole by the decision writer and read whole by the
decision API; nothing queries inside it. ``jsonb`` converts every record into its
binary form on insert, where ``json`` only checks the text: for the 826 kB record of a
10,000-host call PostgreSQL 15 took 13.9 ms of server time (lz4), 3.2 ms as ``json``,
on the cores the API workers share. ``json`` also keeps what ``jsonb`` refuses, NUL
(``\\u0000``) and lone surrogates, so such a record is stored as the call had it.

Changing the type rewrites the table (every stored record is converted once) and
resets the column's compression, which is set to LZ4 again where the server has it
(revision 0006). Downgrading converts back; a record holding NUL, which ``jsonb``
cannot hold, has it replaced by U+FFFD first.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

_HAS_LZ4 = sa.text("SELECT 'lz4' = ANY(enumvals) FROM pg_settings "
                   "WHERE name = 'default_toast_compression'")


def _retype(type_and_using: str) -> None:
    """Change ``decisions.record``'s type on PostgreSQL, keeping LZ4 where available."""
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return  # SQLite keeps JSON as text either way
    op.execute(f"ALTER TABLE decisions ALTER COLUMN record TYPE {type_and_using}")
    if bind.execute(_HAS_LZ4).scalar():
        op.execute("ALTER TABLE decisions ALTER COLUMN record SET COMPRESSION lz4")


def upgrade() -> None:
    _retype("json USING record::json")


def downgrade() -> None:
    _retype("jsonb USING replace(record::text, '\\u0000', '\\ufffd')::jsonb")
