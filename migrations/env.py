"""Alembic environment: runs migrations online, under an advisory lock on PostgreSQL."""

from alembic import context
from sqlalchemy import text

from cortex.db.engine import make_engine
from cortex.db.models import Base

# Any 64-bit constant unique to Cortex: "cortex" in ASCII.
MIGRATION_LOCK_ID = 0x636F72746578


def run_migrations(connection) -> None:
    """Configure the context on ``connection`` and run the pending migrations."""
    context.configure(connection=connection, target_metadata=Base.metadata,
                      render_as_batch=connection.dialect.name == "sqlite")
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": MIGRATION_LOCK_ID})
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Use the caller's connection if given (cortex.db.migrate), else open one from the URL."""
    connection = context.config.attributes.get("connection")
    if connection is not None:
        run_migrations(connection)
        return
    engine = make_engine(context.config.get_main_option("sqlalchemy.url"))
    with engine.begin() as conn:
        run_migrations(conn)
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit("Cortex migrations run online only: use 'cortex-manage db upgrade'.")
run_migrations_online()
