"""The console scripts fail in one line on stderr, never a traceback (``--debug``: one)."""

import os
import socket
import sqlite3
import subprocess
import sys

import pytest
from sqlalchemy.exc import OperationalError

from cortex.agent import cli as agent_cli
from cortex.cmd import api, manage
from cortex.cmd import sync as sync_cmd
from tests.conftest import DEMO_FLEET, REPO
from tests.topology_fakes import FakeNvml, load_layout, write_tree

UNREACHABLE = "postgresql+psycopg://user:secret@127.0.0.1:1/x"


@pytest.fixture
def env(tmp_path, monkeypatch):
    """No configuration file; the embedded SQLite default under ``tmp_path/data``."""
    monkeypatch.delenv("CORTEX_CONFIG_FILE", raising=False)
    monkeypatch.delenv("CORTEX_DATABASE_CONNECTION", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return tmp_path


def one_line(capsys) -> str:
    """Stderr of the last call, asserted to be exactly one line; nothing on stdout."""
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.err.endswith("\n"), captured.err
    assert captured.out == ""
    return captured.err.rstrip("\n")


def test_unreachable_database_is_one_line_naming_the_url_without_password(
        env, monkeypatch, capsys):
    monkeypatch.setenv("CORTEX_DATABASE_CONNECTION", UNREACHABLE)
    assert manage.main(["db", "upgrade"]) == 1
    line = one_line(capsys)
    assert line.startswith("cortex-manage: database "
                           "postgresql+psycopg://user:***@127.0.0.1:1/x: ")
    assert "Connection refused" in line and "secret" not in line
    with pytest.raises(OperationalError):
        manage.main(["--debug", "db", "upgrade"])


def test_unexpected_errors_name_their_type_and_debug_raises(env, monkeypatch, capsys):
    def broken(conf, args):
        raise RuntimeError("boom\n  in two lines")

    monkeypatch.setattr(manage, "plugins_list", broken)
    assert manage.main(["plugins", "list"]) == 1
    assert one_line(capsys) == ("cortex-manage: error: RuntimeError: boom in two lines "
                                "(use --debug for the traceback)")
    with pytest.raises(RuntimeError, match="boom"):
        manage.main(["--debug", "plugins", "list"])


def test_ctrl_c_ends_quietly_with_130(env, monkeypatch, capsys):
    def interrupted(conf, args):
        raise KeyboardInterrupt

    monkeypatch.setattr(manage, "plugins_list", interrupted)
    assert manage.main(["plugins", "list"]) == 130
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("hidden", ["openstack", "keystoneauth1"])
def test_sync_without_the_sync_extra_names_the_pip_command(env, monkeypatch, capsys, hidden):
    monkeypatch.setitem(sys.modules, hidden, None)
    monkeypatch.setattr(sync_cmd, "setup_logging", lambda conf: None)  # keep pytest's handlers
    fix = f"{hidden} is not installed: pip install 'cortex-scheduler[sync]'"
    assert manage.main(["sync", "--once", "--source", "nova"]) == 2
    assert one_line(capsys) == f"cortex-manage: {fix}"
    assert sync_cmd.main([]) == 2
    assert one_line(capsys) == f"cortex-sync: {fix}"


def test_an_extra_missing_deep_inside_a_command_names_its_extra(env, monkeypatch, capsys):
    def needs_orjson(conf, args):
        import orjson  # noqa: F401

    monkeypatch.setitem(sys.modules, "orjson", None)
    monkeypatch.setattr(manage, "plugins_list", needs_orjson)
    assert manage.main(["plugins", "list"]) == 2
    assert one_line(capsys) == ("cortex-manage: orjson is not installed: "
                                "pip install 'cortex-scheduler[fast]'")


def test_simulate_plot_without_matplotlib_fails_before_simulating(env, monkeypatch, capsys):
    import cortex.simulator.session

    def never(*args, **kwargs):
        raise AssertionError("simulated although the plot could not be drawn")

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setattr(cortex.simulator.session, "simulate", never)
    assert manage.main(["simulate", "--fleet", "hgx", "--trace", "synthetic", "--pipeline",
                        "kvm-gpu-topology-aware", "--plot", str(env / "p.png")]) == 2
    assert one_line(capsys) == ("cortex-manage: matplotlib is not installed: "
                                "pip install 'cortex-scheduler[simulate]'")


def test_a_closed_pipe_ends_quietly():
    """``cortex-manage plugins list | head -1``: the reader is gone before the end.

    The reader closes before the first write, so the write fails whatever the timing
    (a reader that reads a line first may close after the output fits in the pipe).
    """
    reader, writer = os.pipe()
    os.close(reader)
    try:
        result = subprocess.run([sys.executable, "-m", "cortex.cmd.manage", "plugins", "list"],
                                stdout=writer, stderr=subprocess.PIPE,
                                cwd=REPO, env=os.environ | {"CORTEX_CONFIG_FILE": ""},
                                timeout=60, check=False)
    finally:
        os.close(writer)
    assert (result.returncode, result.stderr) == (141, b"")


def test_agent_errors_are_one_line(tmp_path, capsys):
    layout = load_layout("hgx-h100-8gpu")
    write_tree(tmp_path, layout)
    argv = ["--once", "--host", "h", "--sysfs-root", str(tmp_path), "--proc-root",
            str(tmp_path / "proc"), "--report", "http://127.0.0.1:1", "--token-file",
            str(tmp_path / "no-token")]
    assert agent_cli.main(argv, nvml=FakeNvml(layout)) == 1
    line = one_line(capsys)
    assert line.startswith("cortex-agent: error: FileNotFoundError: ") and "no-token" in line


def knowledge_version(data) -> int:
    """The knowledge version of the embedded SQLite database under ``data``."""
    with sqlite3.connect(data / "cortex" / "cortex.sqlite") as connection:
        return connection.execute("SELECT version FROM knowledge_version").fetchone()[0]


def test_api_demo_on_a_taken_port_fails_before_touching_the_database(env, monkeypatch, capsys):
    from flask import Flask

    monkeypatch.setattr(Flask, "run", lambda app, **kw: pytest.fail("served"))
    monkeypatch.setattr(api, "setup_logging", lambda conf: None)  # keep pytest's handlers
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = ["--demo", "--host", "127.0.0.1", "--port", str(port)]
        expected = f"cortex-api: cannot listen on 127.0.0.1:{port}: Address already in use"
        assert api.main(argv) == 1
        assert one_line(capsys) == expected
        assert not (env / "data").exists(), "no database made for a server that cannot run"

        assert manage.main(["db", "upgrade"]) == 0  # the first demo's database
        assert manage.main(["load-fleet", str(DEMO_FLEET)]) == 0
        capsys.readouterr()
        before = knowledge_version(env / "data")
        assert api.main(argv) == 1
        assert one_line(capsys) == expected
        assert knowledge_version(env / "data") == before, "the demo fleet was loaded again"
