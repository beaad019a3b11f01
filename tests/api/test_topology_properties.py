"""Whatever an agent's report the API stores, every reader reads back (schemathesis).

Reports generated from the OpenAPI document's ``TopologyReport`` (schema-valid, so they
reach the store; the consistency checks refuse some with 400) are posted for one host
of the demo fleet; after each one stored, a fresh knowledge load skips no row and gives
the host its topology, and the report API, the dashboard's host and GPU pages and
``/metrics`` answer 200. Derandomized: the same examples each run.
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from tests.api.conftest import demo_app

HOST = "cmp0047"


@pytest.fixture(scope="module")
def served():
    with demo_app("topology_properties") as (_url, _engine, app):
        yield app


def test_every_stored_report_reads_back_through_every_reader(served):
    schema = schemathesis.openapi.from_wsgi("/openapi.json", served)
    operation = schema["/v1/topology/{host}"]["POST"]
    client = served.test_client()
    knowledge = served.extensions["cortex"].knowledge
    statuses: list[int] = []

    @settings(max_examples=60, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=schemathesis.GenerationMode.POSITIVE))
    def write_and_read(case):
        case.path_parameters = {"host": HOST}
        if isinstance(case.body, dict):
            case.body.pop("host", None)
        response = case.call()
        statuses.append(response.status_code)
        assert response.status_code in (200, 400), response.text[:300]
        if response.status_code != 200:
            return
        knowledge.refresh(force=True)
        view = knowledge.view()
        assert not view.skipped_rows
        assert view.hosts[HOST].topology is not None
        assert client.get(f"/v1/topology/{HOST}").status_code == 200
        for page in (f"/ui/hosts/{HOST}", "/ui/gpus", "/ui", "/metrics"):
            assert client.get(page).status_code == 200, page

    write_and_read()
    # The examples are the same within one environment, not across them (16 of 60 stored
    # here, 9 on CI): the bound only proves the store and its readers ran many times.
    assert statuses.count(200) >= 5, (len(statuses), sorted(statuses))
