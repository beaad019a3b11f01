"""Alembic: the models and the migrations agree, upgrades are idempotent."""

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from cortex.db import migrate
from cortex.db.models import Base


def test_database_is_at_head(engine):
    assert migrate.current_revision(engine) == migrate.head_revision()


def test_upgrade_twice_is_harmless(engine):
    migrate.upgrade(engine)
    assert migrate.current_revision(engine) == migrate.head_revision()


def test_models_match_migrations(engine):
    with engine.connect() as connection:
        diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    assert diff == []
