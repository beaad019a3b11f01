"""Fuzzing the API from its own OpenAPI document (schemathesis, bounded for CI).

For every operation, generated requests (valid and invalid) never get a 5xx, never
a stack trace, and every 200 of an external endpoint fits the callers' schema and
names only hosts of the request, each once.
"""

import json

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from cortex.api.app import create_app
from cortex.api.schema import RequestValidator, load_openapi
from tests.api.conftest import make_conf

VALIDATOR = RequestValidator(load_openapi())
OPERATIONS = [(path, method) for path, item in load_openapi()["paths"].items()
              for method in item if method in ("get", "post", "head")]
# Invalid requests can only be generated where there is something to get wrong.
TAKES_INPUT = [(p, m) for p, m in OPERATIONS
               if "requestBody" in load_openapi()["paths"][p][m]
               or any(param.get("in") == "query"
                      for param in load_openapi()["paths"][p][m].get("parameters", ()))]
CASES = ([(p, m, schemathesis.GenerationMode.POSITIVE) for p, m in OPERATIONS]
         + [(p, m, schemathesis.GenerationMode.NEGATIVE) for p, m in TAKES_INPUT])


@pytest.fixture(scope="module")
def api_schema(engine):
    app = create_app(make_conf(), engine=engine)
    yield schemathesis.openapi.from_wsgi("/openapi.json", app)
    app.extensions["cortex"].decisions.close()


def check(case) -> None:
    response = case.call()
    text = response.text
    assert response.status_code < 500, (case.path, response.status_code, text[:300])
    assert "Traceback" not in text
    if case.path.startswith("/scheduler/") and response.status_code == 200:
        answer = json.loads(text)
        assert VALIDATOR.response_errors(answer) == []
        asked = {h["host"] for h in case.body["hosts"]}
        assert set(answer["hosts"]) <= asked
        assert len(answer["hosts"]) == len(set(answer["hosts"]))


@pytest.mark.parametrize("path, method, mode", CASES)
def test_api_never_fails_the_caller(api_schema, path, method, mode):
    operation = api_schema[path][method.upper()]

    @settings(max_examples=30, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=mode))
    def fuzz(case):
        check(case)

    fuzz()
