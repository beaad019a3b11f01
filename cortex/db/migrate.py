"""Alembic, driven from Python: ``upgrade``/``current`` for cortex-manage and the tests.

The migration scripts live in the top-level ``migrations/`` folder of the checkout,
which the wheel ships as the package ``cortex_migrations``, so an installed
``cortex-manage db upgrade`` works outside a checkout.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine


def migrations_path() -> Path:
    """The directory holding ``env.py`` and ``versions/`` (installed or in a checkout)."""
    try:
        return Path(str(resources.files("cortex_migrations")))
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[2] / "migrations"


def alembic_config(url: str) -> AlembicConfig:
    """An Alembic config pointing at the shipped scripts and at ``url``."""
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(migrations_path()))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Upgrade the schema of ``engine``'s database to ``revision`` (idempotent).

    ``env.py`` takes a PostgreSQL advisory lock, so concurrent upgrades serialise.
    """
    cfg = alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.begin() as connection:
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, revision)


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at, or None when it was never migrated."""
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head_revision() -> str:
    """The newest revision the shipped scripts know."""
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(migrations_path()))
    return ScriptDirectory.from_config(cfg).get_current_head()
