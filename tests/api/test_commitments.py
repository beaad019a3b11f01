"""Committed reservations over HTTP on the demo fleet: placed, honoured, listed, deleted.

The operator's story on the demo fleet's az-1 H100 hosts that no tenant
isolation keeps for project ``p...`` (cmp0010 with 2 free GPUs, cmp0011 with 6): 8
H100 committed to one project as four 2-GPU instances; another project's 2-GPU
request is steered off that room, the owner's lands in it; deleting the commitment
frees the room.
"""

import copy
import json
from datetime import UTC, datetime, timedelta

import pytest

from cortex.api.app import create_app
from tests.api.conftest import make_conf, stop_app
from tests.conftest import FIXTURES, demo_database, demo_sqlite, load_body

OWNER, OTHER = "a" * 32, "c" * 32
H100 = "2330"
HOSTS = ("cmp0000", "cmp0001", "cmp0005", "cmp0008", "cmp0009", "cmp0010", "cmp0011")


@pytest.fixture(scope="module")
def demo():
    with demo_database("commitments") as found:
        yield found


@pytest.fixture
def client(demo):
    url, engine = demo
    app = create_app(make_conf(**{"database.connection": url,
                                  "database.knowledge_check_interval": 0.0}), engine=engine)
    yield app.test_client()
    for commitment in app.test_client().get("/v1/commitments").get_json()["commitments"]:
        app.test_client().delete(f"/v1/commitments/{commitment['id']}")
    stop_app(app)


def reloaded(client):
    """Let the worker load the knowledge version a write moved."""
    knowledge = client.application.extensions["cortex"].knowledge
    knowledge.view()
    knowledge.wait_for_refresh(10)


def ask(client, project):
    """A 2x H100 create of ``project`` naming every H100 host of az-1."""
    body = copy.deepcopy(load_body(FIXTURES / "nova" / "gpu-2xh100-pinned.json"))
    body["hosts"] = [{"host": h, "hypervisor_hostname": f"{h}.cloud.example"} for h in HOSTS]
    body["weights"] = dict.fromkeys(HOSTS, 0.0)
    body["spec"]["nova_object.data"]["project_id"] = project
    answer = client.post("/scheduler/nova/external", json=body)
    assert answer.status_code == 200, answer.get_data(as_text=True)
    return answer.get_json()["hosts"]


def commit(client, **changes):
    body = {"project_id": OWNER, "availability_zone": "az-1", "vcpus": 16,
            "memory_mb": 65536, "gpus": 2, "products": [H100], "count": 4,
            "end_at": (datetime.now(UTC) + timedelta(days=30)).isoformat(),
            "description": "8 H100 for the owner"} | changes
    return client.post("/v1/commitments", json=body)


def test_other_projects_are_steered_off_the_room_and_the_owner_lands_in_it(client):
    before = ask(client, OTHER)
    assert set(before) == {"cmp0010", "cmp0011"}  # the others are isolated for p...
    created = commit(client)
    assert created.status_code == 201, created.get_data(as_text=True)
    commitment = created.get_json()
    assert sorted(h["host"] for h in commitment["holds"]) == [
        "cmp0010", "cmp0011", "cmp0011", "cmp0011"]  # every free H100 they have
    assert all(len(h["gpus"]) == 2 and h["resources"]["PCPU"] == 16
               for h in commitment["holds"])
    assert len({(h["host"], g) for h in commitment["holds"] for g in h["gpus"]}) == 8
    assert commitment["state"] == "active" and commitment["in_use"] == 0
    reloaded(client)

    assert ask(client, OTHER) == []  # the filters find no free H100 pair left
    owner = ask(client, OWNER)
    assert set(owner) == {"cmp0010", "cmp0011"}

    metrics = client.get("/metrics").get_data(as_text=True)
    for state, value in (("reserved", 8.0), ("used", 0.0), ("idle", 8.0)):
        assert (f'cortex_committed_gpus{{availability_zone="az-1",products="{H100}",'
                f'state="{state}"}} {value}') in metrics

    listed = client.get("/v1/commitments").get_json()["commitments"]
    assert [c["id"] for c in listed] == [commitment["id"]]
    shown = client.get(f"/v1/commitments/{commitment['id']}").get_json()
    assert sorted(shown["holds"], key=lambda h: h["id"]) == sorted(
        commitment["holds"], key=lambda h: h["id"])

    assert client.delete(f"/v1/commitments/{commitment['id']}").status_code == 204
    reloaded(client)
    assert ask(client, OTHER) == before
    assert client.get(f"/v1/commitments/{commitment['id']}").status_code == 404
    assert client.delete(f"/v1/commitments/{commitment['id']}").status_code == 404


def test_a_commitment_larger_than_the_zone_is_refused_whole(client):
    answer = commit(client, count=5)
    assert answer.status_code == 409
    assert "4 of 5 instances fit" in answer.get_data(as_text=True)
    assert client.get("/v1/commitments").get_json() == {"commitments": []}


def test_an_expired_commitment_holds_nothing(client):
    before = ask(client, OTHER)
    past = datetime.now(UTC) - timedelta(days=2)
    created = commit(client, start_at=past.isoformat(),
                     end_at=(past + timedelta(days=1)).isoformat())
    assert created.status_code == 201 and created.get_json()["state"] == "expired"
    reloaded(client)
    assert ask(client, OTHER) == before


@pytest.mark.parametrize("changes, message", [
    ({"count": 0}, "count"), ({"vcpus": "8"}, "vcpus"), ({"products": ["h100"]}, "products"),
    ({"end_at": "next month"}, "end_at"), ({"availability_zone": "az-9"}, "az-9"),
    ({"end_at": "2020-01-01T00:00:00Z"}, "end_at must be after start_at"),
    ({"tenant": "x"}, "tenant"),
])
def test_bad_commitments_get_400_and_nothing_is_stored(client, changes, message):
    answer = commit(client, **changes)
    assert answer.status_code == 400, answer.get_data(as_text=True)
    assert message in answer.get_data(as_text=True)
    assert client.get("/v1/commitments").get_json() == {"commitments": []}


def test_cortex_manage_commitments_create_list_show_delete(tmp_path, monkeypatch, capsys):
    from cortex.cmd import manage

    url, engine = demo_sqlite(tmp_path / "cortex.sqlite")
    monkeypatch.setenv("CORTEX_DATABASE_CONNECTION", url)
    monkeypatch.delenv("CORTEX_CONFIG_FILE", raising=False)
    create = ["commitments", "create", "--project", "p" * 32, "--availability-zone", "az-1",
              "--vcpus", "96", "--memory-mb", "524288", "--gpus", "8", "--product", H100,
              "--count", "2", "--end", "2099-01-01T00:00:00Z", "-f", "json"]
    assert manage.main(create) == 0
    made = json.loads(capsys.readouterr().out)
    assert made["count"] == 2 and len({h["host"] for h in made["holds"]}) == 2
    assert manage.main(["commitments", "list", "-f", "value"]) == 0
    row = capsys.readouterr().out.split()
    assert row[0] == made["id"] and "active" in row
    assert manage.main(["commitments", "show", made["id"], "-f", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["id"] == made["id"]
    # refused whole: exit 1 and one line; not a commitment: exit 2
    assert manage.main([*create[:-4], "--count", "40", "--end", "2099-01-01"]) == 1
    assert "instances fit" in capsys.readouterr().err
    assert manage.main([*create[:-4], "--count", "1", "--end", "2000-01-01"]) == 2
    assert "end_at must be after start_at" in capsys.readouterr().err
    assert manage.main(["commitments", "delete", made["id"]]) == 0
    assert manage.main(["commitments", "delete", made["id"]]) == 1
    capsys.readouterr()
    assert manage.main(["commitments", "list", "-f", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    engine.dispose()
