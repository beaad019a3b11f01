"""Configuration: file, environment overrides, defaults, errors, the sample file."""

import pytest

from cortex import conf
from tests.conftest import REPO


def test_defaults_without_file_use_embedded_sqlite(tmp_path):
    config = conf.load(environ={"XDG_DATA_HOME": str(tmp_path)})
    assert config.get("api", "port") == 8080
    assert config.database_url == f"sqlite:///{tmp_path / 'cortex' / 'cortex.sqlite'}"


def test_file_then_environment(tmp_path):
    path = tmp_path / "cortex.conf"
    path.write_text("[DEFAULT]\ndebug = true\n[api]\nport = 9000\n"
                    "[database]\nconnection = postgresql+psycopg://file/db\n")
    config = conf.load(str(path), environ={"CORTEX_DATABASE_CONNECTION": "sqlite:///env"})
    assert config.get("DEFAULT", "debug") is True
    assert config.get("api", "port") == 9000
    assert config.database_url == "sqlite:///env"


def test_config_file_from_environment(tmp_path):
    path = tmp_path / "c.conf"
    path.write_text("[scheduler]\nunknown_host_policy = drop\n")
    config = conf.load(environ={"CORTEX_CONFIG_FILE": str(path)})
    assert config.get("scheduler", "unknown_host_policy") == "drop"


@pytest.mark.parametrize("text, env, message", [
    ("[api]\nport = eighty\n", {}, "[api] port: 'eighty' is not a valid int"),
    ("[api]\nprot = 1\n", {}, "unknown option [api] prot"),
    ("[apii]\nport = 1\n", {}, "unknown section [apii]"),
    ("", {"CORTEX_DEFAULT_DEBUG": "maybe"}, "[DEFAULT] debug: 'maybe' is not a valid bool"),
])
def test_bad_configuration_names_the_option(tmp_path, text, env, message):
    path = tmp_path / "cortex.conf"
    path.write_text(text)
    with pytest.raises(conf.ConfigError) as info:
        conf.load(str(path), environ=env)
    assert message in str(info.value)


def test_missing_file_is_an_error():
    with pytest.raises(conf.ConfigError, match="does not exist"):
        conf.load("/nonexistent/cortex.conf", environ={})


def test_sample_file_is_generated_from_the_options():
    assert (REPO / "etc" / "cortex" / "cortex.conf.sample").read_text() == conf.sample()


def test_shipped_files_are_found():
    assert conf.shipped_file("pipelines.yaml").name == "pipelines.yaml"
    with pytest.raises(conf.ConfigError):
        conf.shipped_file("nope.yaml")


@pytest.mark.parametrize("text, message", [
    ("[network]\nprometheus_query = lldp_neighbor_info\nprometheus_leaf_label =\n",
     "[network] prometheus_leaf_label is required when prometheus_query is set"),
    ("[network]\nprometheus_query = lldp_neighbor_info\nprometheus_block_label = rack-id\n",
     "[network] prometheus_block_label: 'rack-id' is not a Prometheus label name"),
])
def test_bad_network_labels_name_the_option(tmp_path, text, message):
    from cortex.sync.sources.prometheus_network import NetworkQuery

    path = tmp_path / "cortex.conf"
    path.write_text(text)
    with pytest.raises(conf.ConfigError) as info:
        NetworkQuery.from_conf(conf.load(str(path), environ={}))
    assert message in str(info.value)


def test_the_network_query_is_off_by_default():
    from cortex.sync.sources.prometheus_network import NetworkQuery

    assert NetworkQuery.from_conf(conf.load(environ={})) is None
