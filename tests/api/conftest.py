"""An app on the session's database (demo fleet loaded) and a test client."""

from contextlib import contextmanager

import pytest

from cortex import conf
from cortex.api.app import create_app
from tests.conftest import demo_database


def make_conf(**overrides):
    """Built-in defaults plus ``{"section.option": value}`` overrides; no file, no env.

    Authentication is off unless a test turns it on (tests/api/test_auth.py does).
    In-flight reservations are off too: with them every answer changes the next one,
    and these tests assert the rankings of a fixed fleet; tests/api/test_reservations.py
    turns them on. So is the recording of request shapes (tests/api/test_request_shapes.py
    turns it on), which would make every later warm-up replay them.
    """
    return conf.load(environ={}, overrides={"api.auth_strategy": "noauth",
                                            "scheduler.reservation_ttl": 0.0,
                                            "api.warm_up_shapes": 0} | overrides)


@pytest.fixture
def app(engine, database_url):
    app = create_app(make_conf(**{"database.connection": database_url,
                                  "database.knowledge_check_interval": 0.0}), engine=engine)
    yield app
    stop_app(app)


def stop_app(app) -> None:
    """Flush an app's decision log and stop its knowledge checker (before its database goes)."""
    app.extensions["cortex"].decisions.close()
    app.extensions["cortex"].knowledge.close()
    app.extensions["cortex"].shapes.close()


def keystone_conf(tmp_path):
    """A Config with auth_strategy keystone (keystonemiddleware's AuthTokenFixture answers).

    Reservations off, as in :func:`make_conf`: a Nova call would otherwise leave one in
    the session database for the tests after this one (300 s, the default TTL).
    """
    path = tmp_path / "cortex.conf"
    path.write_text("[api]\nauth_strategy = keystone\n[keystone_authtoken]\n"
                    "www_authenticate_uri = http://127.0.0.1:5000/v3\n"
                    "[scheduler]\nreservation_ttl = 0\n")
    return conf.load(str(path), environ={})


@pytest.fixture
def static_app(engine, request):
    """An app with static tokens: those of the requesting module's ``TOKENS``."""
    app = create_app(make_conf(**{"api.auth_strategy": "static",
                                  "api.static_tokens": request.module.TOKENS}), engine=engine)
    yield app
    stop_app(app)


@pytest.fixture(scope="module")
def module_static_app(engine, request):
    """:func:`static_app` built once for the module, for tests that only read answers."""
    app = create_app(make_conf(**{"api.auth_strategy": "static",
                                  "api.static_tokens": request.module.TOKENS}), engine=engine)
    yield app
    stop_app(app)


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture(scope="module")
def module_client(engine, database_url):
    """A test client of one app built for the whole module, as :func:`app` builds it.

    For the tests that only ask and read the answer (refusals, rankings of the fixed
    demo fleet): building an app takes about half a second, so a sweep of fifty bodies
    shares one instead of building fifty. A test that changes the app or reads what an
    earlier answer left behind takes :func:`client`.
    """
    app = create_app(make_conf(**{"database.connection": database_url,
                                  "database.knowledge_check_interval": 0.0}), engine=engine)
    yield app.test_client()
    stop_app(app)


@contextmanager
def demo_app(purpose: str):
    """``(url, engine, app)``: an app on a database of its own with the demo fleet.

    The knowledge is checked on every view (``knowledge_check_interval = 0``); the app
    is stopped and the database dropped afterwards.
    """
    with demo_database(purpose) as (url, engine):
        app = create_app(make_conf(**{"database.connection": url,
                                      "database.knowledge_check_interval": 0.0}),
                         engine=engine)
        try:
            yield url, engine, app
        finally:
            stop_app(app)
