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
    ("[api]\nprot = 1\n", {}, "unknown option [api] prot (did you mean port"),
    ("[apii]\nport = 1\n", {}, "unknown section [apii] (did you mean api"),
    ("", {"CORTEX_API_PROT": "1"},
     "unknown environment variable CORTEX_API_PROT (did you mean CORTEX_API_PORT"),
    ("", {"CORTEX_DATABASE_CONECTION": "sqlite://"},
     "unknown environment variable CORTEX_DATABASE_CONECTION (did you mean "
     "CORTEX_DATABASE_CONNECTION"),
    ("", {"CORTEX_NOTHING_LIKE_IT": "1"}, "unknown environment variable CORTEX_NOTHING_LIKE_IT"),
    ("", {"CORTEX_DEFAULT_DEBUG": "maybe"}, "[DEFAULT] debug: 'maybe' is not a valid bool"),
])
def test_bad_configuration_names_the_option(tmp_path, text, env, message):
    path = tmp_path / "cortex.conf"
    path.write_text(text)
    with pytest.raises(conf.ConfigError) as info:
        conf.load(str(path), environ=env)
    assert message in str(info.value)


def test_variables_that_are_not_options_are_accepted(tmp_path):
    path = tmp_path / "c.conf"
    path.write_text("")
    config = conf.load(environ={"CORTEX_CONFIG_FILE": str(path), "CORTEX_WORKERS": "2",
                                "CORTEX_TEST_DATABASE_URL": "sqlite", "CORTEXT": "x",
                                "CORTEX_API_PORT": "9000"})
    assert config.get("api", "port") == 9000


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


def _sample_values() -> dict[tuple[str, str], str]:
    """``(section, name) -> text`` of every ``#name = value`` line of the shipped sample."""
    values, section = {}, None
    for line in (REPO / "etc" / "cortex" / "cortex.conf.sample").read_text().splitlines():
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif line.startswith("#") and " = " in line and not line.startswith("# "):
            name, _, value = line[1:].partition(" = ")
            values[(section, name)] = value
    return values


@pytest.mark.parametrize("option", conf.OPTIONS, ids=lambda o: f"{o.section}.{o.name}")
def test_every_option_of_the_sample_loads_as_its_default(tmp_path, option):
    text = _sample_values()[(option.section, option.name)]
    path = tmp_path / "cortex.conf"
    path.write_text(f"[{option.section}]\n{option.name} = {text}\n")
    assert conf.load(str(path), environ={}).get(option.section, option.name) == option.default


def _outside(option) -> list[str]:
    """Texts of values just outside ``option``'s allowed set (none for a free option)."""
    if option.choices is not None:
        return ["dorp", f"{option.choices[-1]}x"]
    texts = []
    step = 1 if option.type is int else 0.001
    if option.minimum is not None:
        texts.append(str(option.type(option.minimum - step)))
    if option.maximum is not None:
        texts.append(str(option.type(option.maximum + step)))
    if option.type is float:
        texts += ["nan"] if texts else []
    return texts


CONSTRAINED = [o for o in conf.OPTIONS if _outside(o)]


@pytest.mark.parametrize("option", CONSTRAINED, ids=lambda o: f"{o.section}.{o.name}")
def test_values_outside_an_option_are_refused_at_load_in_one_line(tmp_path, option):
    for text in _outside(option):
        path = tmp_path / "cortex.conf"
        path.write_text(f"[{option.section}]\n{option.name} = {text}\n")
        with pytest.raises(conf.ConfigError) as info:
            conf.load(str(path), environ={})
        message = str(info.value)
        assert "\n" not in message
        assert message.startswith(f"[{option.section}] {option.name}: ")
        assert text.rstrip("x") in message or "nan" in message
        assert f"expected {option.allowed()}" in message
        env = f"CORTEX_{option.section.upper()}_{option.name.upper()}"
        with pytest.raises(conf.ConfigError):
            conf.load(environ={env: text})


@pytest.mark.parametrize("option", [o for o in conf.OPTIONS if o.choices],
                         ids=lambda o: f"{o.section}.{o.name}")
def test_every_choice_is_accepted(option):
    env = f"CORTEX_{option.section.upper()}_{option.name.upper()}"
    for choice in option.choices:
        assert conf.load(environ={env: choice}).get(option.section, option.name) == choice


def test_the_constraints_cover_the_options_with_fixed_values():
    constrained = {(o.section, o.name) for o in CONSTRAINED}
    assert {("scheduler", "unknown_host_policy"), ("api", "auth_strategy"),
            ("DEFAULT", "log_format"), ("sync", "sources"), ("api", "port"),
            ("database", "connect_timeout"), ("sync", "jitter")} <= constrained
    # every number that is not free text has a lower bound: no negative interval slips in
    numbers = [o for o in conf.OPTIONS if o.type in (int, float)]
    assert [f"{o.section}.{o.name}" for o in numbers if o.minimum is None] == []


def test_overrides_are_checked_too():
    with pytest.raises(conf.ConfigError, match="unknown_host_policy: 'dorp' is not allowed"):
        conf.load(environ={}).with_overrides({"scheduler.unknown_host_policy": "dorp"})


def test_config_check_refuses_a_misspelled_value_in_one_line(tmp_path, capsys):
    from cortex.cmd.manage import main

    path = tmp_path / "cortex.conf"
    path.write_text("[scheduler]\nunknown_host_policy = dorp\n")
    assert main(["--config-file", str(path), "config", "check"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err]
    assert "[scheduler] unknown_host_policy: 'dorp' is not allowed; expected one of keep, drop" \
        in err


@pytest.mark.parametrize("text, message", [
    ("[api]\nstatic_tokens = ops:root:secret\n", "[api] static_tokens entry 1 must be"),
    ("[gpu]\npci_alias = {\"name\": \"a100\", \"numa_policy\": \"sometimes\"}\n",
     "[gpu] pci_alias a100: numa_policy 'sometimes' is not one of"),
])
def test_config_check_refuses_what_the_api_would_refuse_at_start(tmp_path, capsys, text,
                                                                   message):
    from cortex.cmd.manage import main

    path = tmp_path / "cortex.conf"
    path.write_text(text)
    assert main(["--config-file", str(path), "config", "check"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err] and message in err


def test_overrides_as_text_are_parsed_and_wrong_types_refused():
    assert conf.load(environ={}, overrides={"scheduler.reservation_ttl": "0"}).get(
        "scheduler", "reservation_ttl") == 0.0
    assert conf.load(environ={}, overrides={"scheduler.reservation_ttl": 5}).get(
        "scheduler", "reservation_ttl") == 5
    with pytest.raises(conf.ConfigError, match=r"\[scheduler\] reservation_ttl: 'soon'"):
        conf.load(environ={}, overrides={"scheduler.reservation_ttl": "soon"})
    with pytest.raises(conf.ConfigError, match=r"\[api\] warm_up: 3 is not a valid bool"):
        conf.load(environ={}, overrides={"api.warm_up": 3})
    with pytest.raises(conf.ConfigError, match=r"is not a valid int"):
        conf.load(environ={}, overrides={"scheduler.step_memo_size": True})
