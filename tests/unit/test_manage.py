"""cortex-manage and cortex-api argument handling, on a throwaway SQLite database."""

import pytest

from cortex.cmd import api, manage
from tests.conftest import DEMO_FLEET


@pytest.fixture
def sqlite_env(tmp_path, monkeypatch):
    monkeypatch.setenv("CORTEX_DATABASE_CONNECTION", f"sqlite:///{tmp_path / 'c.sqlite'}")
    monkeypatch.delenv("CORTEX_CONFIG_FILE", raising=False)
    return tmp_path


def test_upgrade_load_and_list(sqlite_env, capsys):
    assert manage.main(["db", "upgrade"]) == 0
    assert manage.main(["db", "version"]) == 0
    assert manage.main(["load-fleet", str(DEMO_FLEET)]) == 0
    assert "loaded 58 hosts" in capsys.readouterr().out
    assert manage.main(["decisions", "list", "--resource-id", "x", "-f", "json"]) == 0
    assert capsys.readouterr().out.strip() == "[]"
    assert manage.main(["decisions", "prune", "--days", "1"]) == 0


def test_bad_fleet_exits_2_with_one_line(sqlite_env, capsys, tmp_path):
    manage.main(["db", "upgrade"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("hosts: [{host: x}]\n")
    assert manage.main(["load-fleet", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cortex-manage: ") and "uuid" in err and "Traceback" not in err


def test_config_check_reports_bad_pipelines(sqlite_env, capsys, tmp_path, monkeypatch):
    assert manage.main(["config", "check"]) == 0
    bad = tmp_path / "pipelines.yaml"
    bad.write_text("defaults: {nova: p}\npipelines: {p: {service: nova, "
                   "filters: [{name: filter_typo}]}}\n")
    monkeypatch.setenv("CORTEX_SCHEDULER_PIPELINES_FILE", str(bad))
    assert manage.main(["config", "check"]) == 2
    assert "unknown filter 'filter_typo'" in capsys.readouterr().err


def test_plugins_list_documents_every_plugin(capsys):
    assert manage.main(["plugins", "list"]) == 0
    out = capsys.readouterr().out
    for name in ("filter_status", "filter_has_enough_capacity", "weigher_binpack",
                 "weigher_pool_free_capacity", "detector_gpu_island"):
        assert name in out
    assert manage.main(["plugins", "list", "-f", "yaml"]) == 0
    assert "name: resource_weights" in capsys.readouterr().out


def test_api_refuses_bad_config(sqlite_env, tmp_path, capsys):
    path = tmp_path / "c.conf"
    path.write_text("[api]\nport = x\n")
    assert api.main(["--config-file", str(path)]) == 2
    assert "not a valid int" in capsys.readouterr().err


def test_api_demo_loads_the_fleet_and_serves_without_auth(sqlite_env, monkeypatch):
    from flask import Flask

    served = {}
    monkeypatch.setattr(Flask, "run", lambda app, **kw: served.update(app=app, **kw))
    assert api.main(["--demo", "--port", "18123"]) == 0
    app = served["app"]
    assert served["port"] == 18123
    assert app.extensions["cortex"].authorizer.strategy == "noauth"
    assert len(app.extensions["cortex"].knowledge.view().hosts) == 58
    app.extensions["cortex"].decisions.close()
