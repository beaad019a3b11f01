"""cortex-manage's list commands: a table by default, ``-f json|yaml|value`` as cliff has them."""

import json
from datetime import UTC, datetime

import pytest
import yaml
from sqlalchemy import insert, select

from cortex.cli import emit
from cortex.cmd import manage
from cortex.db import models
from cortex.db.engine import make_engine


@pytest.fixture
def database(tmp_path, monkeypatch):
    """An upgraded SQLite database with two decisions and one reservation."""
    url = f"sqlite:///{tmp_path / 'c.sqlite'}"
    monkeypatch.setenv("CORTEX_DATABASE_CONNECTION", url)
    monkeypatch.delenv("CORTEX_CONFIG_FILE", raising=False)
    assert manage.main(["db", "upgrade"]) == 0
    decisions = [("d-1", datetime(2025, 3, 1, 10, 0, tzinfo=UTC), "nova", "vm-1", "p",
                  ["h1", "h2", "h3"], ["h2", "h1"]),
                 ("d-2", datetime(2025, 3, 1, 10, 5, 0, 500000, tzinfo=UTC), "cinder", None,
                  None, ["h1"], [])]
    with make_engine(url).begin() as connection:
        connection.execute(insert(models.Decision), [
            {"id": id_, "created_at": at, "service": service, "resource_id": resource,
             "pipeline": pipeline, "outcome": "ok", "duration_ms": 1.5,
             "record": {"hosts": hosts, "result": result}}
            for id_, at, service, resource, pipeline, hosts, result in decisions])
        connection.execute(insert(models.InflightReservation).values(
            id="r-1", host="h2", instance_uuid="vm-1", group_id=None,
            resources={"VCPU": 4, "MEMORY_MB": 8192}, gpus=["0000:3b:00.0"],
            created_at=datetime(2025, 3, 1, tzinfo=UTC),
            expires_at=datetime(2099, 1, 1, tzinfo=UTC)))
    return tmp_path


def output(capsys, *argv) -> str:
    """Stdout of ``cortex-manage argv`` (which must succeed)."""
    assert manage.main(list(argv)) == 0
    return capsys.readouterr().out


def test_decisions_list_is_one_line_per_decision(database, capsys):
    assert output(capsys, "decisions", "list") == (
        "time                  service  resource_id  pipeline  hosts_in  hosts_out  first_host\n"
        "--------------------  -------  -----------  --------  --------  ---------  ----------\n"
        "2025-03-01T10:05:00Z  cinder   -            -         1         0          -\n"
        "2025-03-01T10:00:00Z  nova     vm-1         p         3         2          h2\n")
    assert output(capsys, "decisions", "list", "-f", "value", "--limit", "1") == (
        "2025-03-01T10:05:00Z cinder - - 1 0 -\n")


def test_decisions_list_as_json_and_yaml(database, capsys):
    rows = json.loads(output(capsys, "decisions", "list", "-f", "json"))
    assert rows[1] == {"time": "2025-03-01T10:00:00Z", "service": "nova",
                       "resource_id": "vm-1", "pipeline": "p", "hosts_in": 3, "hosts_out": 2,
                       "first_host": "h2", "id": "d-1", "request_id": None, "intent": None,
                       "outcome": "ok", "duration_ms": 1.5}
    assert yaml.safe_load(output(capsys, "decisions", "list", "--format", "yaml")) == rows
    assert json.loads(output(capsys, "decisions", "list", "-f", "json",
                             "--resource-id", "vm-1")) == rows[1:]


def test_reservations_list(database, capsys):
    assert output(capsys, "reservations", "list", "-f", "value") == (
        "r-1 h2 vm-1 - VCPU=4,MEMORY_MB=8192 0000:3b:00.0 2099-01-01T00:00:00Z\n")
    table = output(capsys, "reservations", "list").splitlines()
    assert table[0].split() == ["id", "host", "instance_uuid", "group_id", "resources", "gpus",
                                "expires_at"]
    assert table[2].split() == ["r-1", "h2", "vm-1", "-", "VCPU=4,MEMORY_MB=8192",
                                "0000:3b:00.0", "2099-01-01T00:00:00Z"]
    rows = json.loads(output(capsys, "reservations", "list", "-f", "json"))
    assert rows[0]["resources"] == {"VCPU": 4, "MEMORY_MB": 8192}
    assert yaml.safe_load(output(capsys, "reservations", "list", "-f", "yaml")) == rows


def test_reservations_list_groups_and_prune(database, capsys):
    url = f"sqlite:///{database / 'c.sqlite'}"
    with make_engine(url).begin() as connection:
        connection.execute(insert(models.InflightReservation), [
            {"id": f"g-{n}", "host": host, "instance_uuid": None, "group_id": "job",
             "resources": {"VCPU": 4}, "gpus": [], "created_at": datetime(2025, 3, 1, tzinfo=UTC),
             "expires_at": expires}
            for n, host, expires in [(1, "h1", datetime(2099, 1, 1, tzinfo=UTC)),
                                     (2, "h1", datetime(2099, 1, 1, tzinfo=UTC)),
                                     (3, "h3", datetime(2025, 3, 2, tzinfo=UTC))]])
        connection.execute(insert(models.GroupPromise), [
            {"id": "job", "service": "nova", "members": 2, "placed": 2, "min_count": 2,
             "hosts": ["h1", "h1"], "reservations": ["g-1", "g-2"],
             "created_at": datetime(2025, 3, 1, tzinfo=UTC),
             "expires_at": datetime(2099, 1, 1, tzinfo=UTC)},
            {"id": "old", "service": "nova", "members": 1, "placed": 1, "min_count": 1,
             "hosts": ["h3"], "reservations": ["g-3"],
             "created_at": datetime(2025, 3, 1, tzinfo=UTC),
             "expires_at": datetime(2025, 3, 2, tzinfo=UTC)}])
    assert output(capsys, "reservations", "list", "--groups", "-f", "value") == (
        "job nova 2 2 h1=2 2099-01-01T00:00:00Z\n")
    assert output(capsys, "reservations", "prune") == (
        "pruned 1 expired group promises and 1 expired reservations\n")
    with make_engine(url).connect() as connection:
        assert connection.scalars(select(models.GroupPromise.id)).all() == ["job"]


def test_plugins_list_table_value_and_documents(capsys):
    table = output(capsys, "plugins", "list").splitlines()
    assert table[0].split() == ["name", "kind", "services"]
    assert ["filter_capacity", "filter", "cinder,manila"] in [line.split() for line in table]
    assert "filter_capacity filter cinder,manila" in output(capsys, "plugins", "list", "-f",
                                                            "value").splitlines()
    rows = json.loads(output(capsys, "plugins", "list", "-f", "json"))
    assert yaml.safe_load(output(capsys, "plugins", "list", "-f", "yaml")) == rows
    binpack = next(r for r in rows if r["name"] == "weigher_binpack")
    assert binpack["kind"] == "weigher" and binpack["doc"].startswith("weigher_binpack")
    assert {"name", "type", "default"} == set(binpack["options"][0])


def test_network_show_formats(database, capsys, tmp_path):
    topology = tmp_path / "topology.yaml"
    topology.write_text("spines: {s1: {uplink_gbps: 800}}\n"
                        "leaves: {l1: {spine: s1, block: b1, hosts: [h1, h2]}, "
                        "l2: {spine: s1, hosts: [h3]}}\n")
    assert manage.main(["network", "load", str(topology)]) == 0
    capsys.readouterr()
    assert output(capsys, "network", "show", "-f", "value") == (
        "h1 s1 l1 b1 file\nh2 s1 l1 b1 file\nh3 s1 l2 - file\n")
    assert output(capsys, "network", "show") == (
        "host  spine  leaf  block  source\n"
        "----  -----  ----  -----  ------\n"
        "h1    s1     l1    b1     file\n"
        "h2    s1     l1    b1     file\n"
        "h3    s1     l2    -      file\n"
        "\n"
        "name  spine  hosts  uplink_gbps  adjacent  source\n"
        "----  -----  -----  -----------  --------  ------\n"
        "l1    s1     2      -            l2        file\n"
        "l2    s1     1      -            l1        file\n")
    document = json.loads(output(capsys, "network", "show", "--json"))
    assert [leaf["hosts"] for leaf in document["leaves"]] == [["h1", "h2"], ["h3"]]
    assert json.loads(output(capsys, "network", "show", "-f", "json")) == document
    assert yaml.safe_load(output(capsys, "network", "show", "-f", "yaml")) == document


def test_emit_cells_and_empty_tables(capsys):
    emit([], ("a", "bb"), "table")
    emit([{"a": None, "bb": ""}, {"a": [1, 2], "bb": {"k": 1.5}}], ("a", "bb"), "table")
    assert capsys.readouterr().out == (
        "a  bb\n-  --\n"
        "a    bb\n---  -----\n-    -\n1,2  k=1.5\n")
    emit([], ("a",), "json")
    emit([], ("a",), "yaml")
    assert capsys.readouterr().out == "[]\n[]\n"
