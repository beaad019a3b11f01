"""Authentication: external endpoints token-free, everything else by role."""

import pytest
from keystonemiddleware.fixture import AuthTokenFixture

from cortex.api.app import create_app
from cortex.conf import ConfigError
from tests.api.conftest import keystone_conf, make_conf
from tests.api.test_contract import assert_error, nova_body, post

TOKENS = "ops:admin:admin-secret, grafana:reader:reader-secret, cmp0001:agent:agent-secret"


def test_external_endpoints_need_no_token(static_app):
    assert post(static_app.test_client(), "nova", nova_body()).status_code == 200


@pytest.mark.parametrize("token, status", [
    (None, 401), ("wrong", 401), ("", 401), ("agent-secret", 403),
    ("reader-secret", 200), ("admin-secret", 200),
])
def test_decisions_need_reader_or_admin(static_app, token, status):
    headers = {"X-Auth-Token": token} if token is not None else {}
    response = static_app.test_client().get("/v1/decisions", headers=headers)
    if status == 200:
        assert response.status_code == 200
    else:
        error = assert_error(response, status)
        assert "secret" not in error["detail"]  # no token echoed back


def test_public_routes_stay_open(static_app):
    client = static_app.test_client()
    assert client.get("/healthcheck").status_code == 200
    assert client.get("/").status_code == 200
    assert client.get("/openapi.json").status_code == 200


@pytest.mark.parametrize("text", ["a:b", "ops:root:x", "ops::x", ":admin:x"])
def test_bad_static_tokens_fail_at_startup(engine, text):
    with pytest.raises(ConfigError, match="NAME:ROLE:TOKEN") as info:
        create_app(make_conf(**{"api.auth_strategy": "static", "api.static_tokens": text}),
                   engine=engine)
    assert "x" not in str(info.value).split("entry")[0]


def test_unknown_strategy_fails_at_startup(engine):
    with pytest.raises(ConfigError, match="auth_strategy"):
        create_app(make_conf(**{"api.auth_strategy": "magic"}), engine=engine)


def test_shared_secret_on_external_endpoints(engine):
    app = create_app(make_conf(**{"api.external_shared_secret": "s3"}), engine=engine)
    client = app.test_client()
    assert_error(post(client, "nova", nova_body()), 401)
    assert_error(post(client, "nova", nova_body(), headers={"X-Cortex-Shared-Secret": "no"}), 401)
    ok = post(client, "nova", nova_body(), headers={"X-Cortex-Shared-Secret": "s3"})
    assert ok.status_code == 200
    app.extensions["cortex"].decisions.close()


@pytest.fixture
def keystone():
    fixture = AuthTokenFixture()
    fixture.setUp()
    fixture.add_token_data(token_id="tok-admin", role_list=["admin"], project_id="p")
    fixture.add_token_data(token_id="tok-reader", role_list=["reader"], project_id="p")
    fixture.add_token_data(token_id="tok-member", role_list=["member"], project_id="p")
    yield fixture
    fixture.cleanUp()


@pytest.mark.parametrize("token, status", [
    (None, 401), ("tok-unknown", 401), ("tok-member", 403), ("tok-reader", 200),
    ("tok-admin", 200),
])
def test_keystone_tokens(engine, keystone, token, status, tmp_path):
    app = create_app(keystone_conf(tmp_path), engine=engine)
    client = app.test_client()
    headers = {"X-Auth-Token": token} if token else {}
    response = client.get("/v1/decisions", headers=headers)
    assert response.status_code == status, response.get_data(as_text=True)
    assert post(client, "nova", nova_body()).status_code == 200  # still token-free
    app.extensions["cortex"].decisions.close()
