"""Fuzzing the API from its own OpenAPI document (schemathesis, bounded for CI).

The document is the one the app serves (``/openapi.json``). For every operation,
generated requests (valid and invalid; hypothesis derandomized, so the same examples on
every run, 30 per case) never get a 5xx, never a stack trace, and every 200 of an
external endpoint fits the callers' schema and names only hosts of the request, each
once. The code and the document must agree:

- every status answered is documented for the operation, with a body of the documented
  content type and schema (schemathesis' conformance checks);
- a request the document rules out is refused (``negative_data_rejection``): an
  out-of-range ``limit`` used to be clamped and answered 200;
- a request the document allows is not refused with 400, except by the rules the
  document states beyond its schemas (hosts without weights, an unknown pipeline, an
  inconsistent topology report), and then never by the service's own schema check.
"""

import json

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import checks

from cortex.api.app import create_app
from cortex.api.schema import RequestValidator, load_openapi
from cortex.request.kubernetes import canonical
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
#: Operations whose documented 400 also covers rules beyond the schemas.
RULES_BEYOND_SCHEMA = {"/scheduler/nova/external", "/scheduler/cinder/external",
                       "/scheduler/manila/external", "/v1/topology/{host}",
                       "/v1/scheduler/{service}/simulate", "/v1/commitments",
                       # a shape (vcpus and memory_mb, or a flavor), a zone with hosts
                       "/v1/capacity",
                       # exactly one of Nodes and NodeNames
                       "/scheduler/kubernetes/filter", "/scheduler/kubernetes/prioritize"}
EXTENDER_SCHEMAS = {"/scheduler/kubernetes/filter": "ExtenderArgs",
                    "/scheduler/kubernetes/prioritize": "ExtenderArgs",
                    "/scheduler/kubernetes/bind": "ExtenderBindingArgs"}
CONFORMANCE = [checks.not_a_server_error, checks.status_code_conformance,
               checks.content_type_conformance, checks.response_schema_conformance,
               checks.negative_data_rejection]


@pytest.fixture(scope="module")
def api_schema(engine):
    # A budget no loaded machine reaches: a 503 for the budget is a right answer that
    # tests/api/test_commitment_writes.py proves; here every 5xx must be a fault.
    app = create_app(make_conf(**{"scheduler.request_time_budget": 60.0}), engine=engine)
    yield schemathesis.openapi.from_wsgi("/openapi.json", app)
    app.extensions["cortex"].decisions.close()


def check(case, mode) -> None:
    response = case.call()
    case.validate_response(response, checks=CONFORMANCE)
    if mode == schemathesis.GenerationMode.POSITIVE and response.status_code == 400:
        schema_valid_refused(case, response.json()["errors"][0]["detail"])
    text = response.text
    assert response.status_code < 500, (case.path, response.status_code, text[:300])
    assert "Traceback" not in text
    if case.path.endswith("/external") and response.status_code == 200:
        answer = json.loads(text)
        assert VALIDATOR.response_errors(answer) == []
        asked = {h["host"] for h in case.body["hosts"]}
        assert set(answer["hosts"]) <= asked
        assert len(answer["hosts"]) == len(set(answer["hosts"]))


def schema_valid_refused(case, detail: str) -> None:
    """A schema-valid request got a 400: only by a rule beyond the schemas."""
    assert case.path in RULES_BEYOND_SCHEMA, (case.path, case.query, detail)
    service = case.path.split("/")[2]
    if case.path in EXTENDER_SCHEMAS:
        assert VALIDATOR.extender_errors(EXTENDER_SCHEMAS[case.path],
                                         canonical(case.body)) == [], detail
    elif case.path.startswith("/scheduler/"):
        assert VALIDATOR.errors(service, case.body) == [], detail
    elif case.path == "/v1/topology/{host}":
        assert VALIDATOR.topology_errors(case.body) == [], detail
    elif case.path == "/v1/commitments":  # ends before it starts, a zone without hosts
        assert VALIDATOR.commitment_errors(case.body) == [], detail


@pytest.mark.parametrize("path, method, mode", CASES)
def test_api_never_fails_the_caller(api_schema, path, method, mode):
    operation = api_schema[path][method.upper()]

    @settings(max_examples=30, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=mode))
    def fuzz(case):
        check(case, mode)

    fuzz()


def test_commitments_statefully_create_show_delete(api_schema):
    """Create, then show and delete what was created (the document's links), many times.

    Generated creates reach the write's refusals (400, 409) and its successes; every
    commitment created is shown and deleted through the ids the creates answered, and
    none of it ever gets a 5xx. The knowledge still loads after every step. Every other
    create keeps its generated project and texts but asks for one instance of 2 vCPUs
    and 2 GiB in any zone until 2099 (a generated zone has no host, a generated period
    has mostly passed, a generated shape seldom fits), so that creates succeed too.
    """
    schema = api_schema.include(path_regex="^/v1/commitments")
    knowledge = api_schema.app.extensions["cortex"].knowledge
    client = api_schema.app.test_client()
    seen: list[tuple[str, int]] = []

    def delete_all() -> None:
        for made in client.get("/v1/commitments").get_json()["commitments"]:
            client.delete(f"/v1/commitments/{made['id']}")

    class Commitments(schema.as_state_machine()):  # type: ignore[misc]
        # Each scenario starts from no commitment and counts its own creates, so that a
        # scenario replayed by Hypothesis meets the same answers (the data it draws from
        # them may not depend on what earlier scenarios left).
        def setup(self):
            delete_all()
            self.posts = 0

        def before_call(self, case):
            if case.method.upper() == "POST" and isinstance(case.body, dict) \
                    and self.posts % 2 == 0:  # the first, third... of a scenario
                case.body.pop("start_at", None)
                case.body.update(availability_zone=None, end_at="2099-01-01T00:00:00Z",
                                 count=1, vcpus=2, memory_mb=2048)

        def validate_response(self, response, case, additional_checks=None, **kwargs):
            case.validate_response(response, checks=CONFORMANCE)
            seen.append((case.operation.method.upper(), response.status_code))
            self.posts += case.operation.method.upper() == "POST"
            assert response.status_code < 500, (case.path, response.text[:300])
            if response.status_code in (201, 204):
                knowledge.refresh(force=True)
                assert knowledge.view().skipped_rows == {}

    try:
        Commitments.run(settings=settings(max_examples=40, stateful_step_count=4,
                                          deadline=None, database=None, derandomize=True,
                                          suppress_health_check=list(HealthCheck)))
    finally:  # the session's database is shared: leave no room held
        delete_all()
    assert ("POST", 201) in seen and ("DELETE", 204) in seen and ("GET", 200) in seen, \
        sorted(set(seen))
