"""Test fixtures: a real PostgreSQL database per test session, migrated once with Alembic.

The database comes from ``$CORTEX_TEST_DATABASE_URL`` or the local server at
``postgresql+psycopg://postgres@127.0.0.1:5432``; each session creates its own
``cortex_test_<pid>`` database and drops it at the end. A server that does not
answer ends the run at once with one line naming it (``bash tests/run.sh`` starts
one). Only ``CORTEX_TEST_DATABASE_URL=sqlite`` runs on SQLite, a weaker check
chosen on purpose.
"""

from __future__ import annotations

import json
import os
import warnings
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from cortex.db import migrate
from cortex.db.engine import make_engine
from cortex.store import reservation_feed
from cortex.store.fleet import import_fleet, read_fleet

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[1]
DEMO_FLEET = REPO / "etc" / "cortex" / "demo-fleet.yaml"
DEFAULT_SERVER = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


# The quick subset (``pytest -m quick``; its time is in docs/operate/install.md): every test but the
# ones that start real servers or processes and the slow sweeps of the API. The slow
# ones are named here by path, so a new test is quick unless it lives among them.
SLOW_PATHS = ("tests/functional/", "tests/sync/", "tests/differential/", "tests/nova_loop/",
              "tests/api/test_fuzz.py", "tests/api/test_pipelines.py",
              "tests/api/test_decision_records.py", "tests/api/test_ui.py",
              "tests/api/test_operator.py", "tests/api/test_reservations.py",
              "tests/api/test_commitment_properties.py",
              "tests/api/test_topology_properties.py")


def pytest_collection_modifyitems(config, items):
    """Mark every test outside :data:`SLOW_PATHS` ``quick``."""
    for item in items:
        path = Path(item.fspath).resolve().relative_to(REPO).as_posix()
        if not path.startswith(SLOW_PATHS):
            item.add_marker(pytest.mark.quick)


def bodies(service: str) -> list[Path]:
    """The bundled request bodies of one service."""
    return sorted((FIXTURES / service).glob("*.json"))


def load_body(path: Path) -> dict:
    """One bundled body as a dict."""
    return json.loads(path.read_text())


def _create_postgres_database(purpose: str = "test") -> str:
    """Create ``cortex_<purpose>_<pid>`` on the server; its URL. Ends the run if none answers."""
    if os.environ.get("CORTEX_TEST_DATABASE_URL") == "sqlite":
        pytest.fail(f"this test needs PostgreSQL ({purpose}); CORTEX_TEST_DATABASE_URL=sqlite")
    server = make_url(os.environ.get("CORTEX_TEST_DATABASE_URL") or DEFAULT_SERVER)
    name = f"cortex_{purpose}_{os.getpid()}"
    try:
        admin = make_engine(server.set(database="postgres").render_as_string(False),
                            isolation_level="AUTOCOMMIT")
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        admin.dispose()
    except OperationalError as exc:
        reason = str(exc.orig or exc).strip().splitlines()[0]
        pytest.exit(f"PostgreSQL unreachable at {server.render_as_string(hide_password=True)}: "
                    f"{reason}. 'bash tests/run.sh' starts one; or set "
                    "CORTEX_TEST_DATABASE_URL (=sqlite for a weaker run on SQLite)", 3)
    return server.set(database=name).render_as_string(False)


def _drop_postgres_database(url: str) -> None:
    """Drop the session's database (connections of the app engines are gone by then)."""
    parsed = make_url(url)
    admin = make_engine(parsed.set(database="postgres").render_as_string(False),
                        isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{parsed.database}" WITH (FORCE)'))
    admin.dispose()


def demo_sqlite(path) -> tuple[str, Engine]:
    """``(url, engine)`` of a SQLite file at ``path`` holding the demo fleet.

    The embedded default ``cortex-api --demo`` runs on.
    """
    url = f"sqlite:///{path}"
    engine = make_engine(url)
    migrate.upgrade(engine)
    with engine.begin() as connection:
        import_fleet(connection, read_fleet(DEMO_FLEET))
    return url, engine


@contextmanager
def demo_database(purpose: str):
    """``(url, engine)`` of a database of its own holding the demo fleet; dropped after."""
    url = _create_postgres_database(purpose)
    engine = make_engine(url)
    migrate.upgrade(engine)
    with engine.begin() as connection:
        import_fleet(connection, read_fleet(DEMO_FLEET))
    try:
        yield url, engine
    finally:
        engine.dispose()
        _drop_postgres_database(url)


def start_demo_cluster():
    """A started private PostgreSQL cluster (tests/pg_cluster.py), migrated, demo fleet in.

    For tests that break their database (freeze, stop); ``destroy()`` it afterwards.
    """
    from tests.pg_cluster import temporary_cluster

    cluster = temporary_cluster().start()
    engine = make_engine(cluster.url)
    migrate.upgrade(engine)
    with engine.begin() as connection:
        import_fleet(connection, read_fleet(DEMO_FLEET))
    engine.dispose()
    return cluster


@pytest.fixture(scope="session")
def database_url(tmp_path_factory) -> str:
    """URL of a freshly created, migrated database for this test session."""
    if os.environ.get("CORTEX_TEST_DATABASE_URL") == "sqlite":
        banner = "CORTEX_TEST_DATABASE_URL=sqlite: running on SQLite; database tests are weaker"
        warnings.warn(banner, stacklevel=1)
        url = f"sqlite:///{tmp_path_factory.mktemp('db') / 'cortex.sqlite'}"
    else:
        url = _create_postgres_database()
    engine = make_engine(url)
    migrate.upgrade(engine)
    engine.dispose()
    yield url
    reservation_feed.stop_all()  # their listeners would retry the dropped database
    if url.startswith("postgresql"):
        _drop_postgres_database(url)


@pytest.fixture
def empty_database_url(database_url, tmp_path):
    """URL of another, empty (never migrated) database, dropped after the test."""
    if not database_url.startswith("postgresql"):
        yield f"sqlite:///{tmp_path / 'empty.sqlite'}"
        return
    url = _create_postgres_database("scratch")
    yield url
    _drop_postgres_database(url)


@pytest.fixture(scope="session")
def engine(database_url):
    """The session's engine, with the demo fleet committed (read-only for tests)."""
    engine = make_engine(database_url)
    with engine.begin() as connection:
        import_fleet(connection, read_fleet(DEMO_FLEET))
    yield engine
    engine.dispose()


@pytest.fixture
def db(engine):
    """A connection inside a transaction rolled back after the test (per-test isolation)."""
    connection = engine.connect()
    transaction = connection.begin()
    yield connection
    transaction.rollback()
    connection.close()
