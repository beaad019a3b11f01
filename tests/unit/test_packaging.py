"""Packaging: setup.cfg lists every package, entry points resolve, files ship."""

import configparser
from importlib.metadata import entry_points

from tests.conftest import REPO


def setup_cfg():
    parser = configparser.ConfigParser()
    parser.read(REPO / "setup.cfg")
    return parser


def test_every_package_is_listed():
    listed = set(setup_cfg()["options"]["packages"].split())
    on_disk = {".".join(p.parent.relative_to(REPO).parts)
               for p in (REPO / "cortex").rglob("__init__.py")}
    on_disk |= {"cortex_migrations", "cortex_migrations.versions"}
    assert listed == on_disk


def test_console_scripts_resolve():
    scripts = {ep.name: ep for ep in entry_points(group="console_scripts")
               if ep.value.startswith("cortex.")}
    assert {"cortex-agent", "cortex-api", "cortex-manage", "cortex-sync"} <= set(scripts)
    for ep in scripts.values():
        assert callable(ep.load())


def test_extras_and_plugin_groups_are_declared():
    cfg = setup_cfg()
    extras = cfg["options.extras_require"]
    assert "openstacksdk" in extras["sync"] and "nvidia-ml-py" in extras["agent"]
    assert "nvidia-ml-py" in extras["test"]  # CI runs the agent's tests with the real pynvml
    assert "requests" in extras["sync"]
    assert "openstacksdk" in extras["test"], "CI installs the test extra and runs the sync tests"
    points = cfg["options.entry_points"]
    assert "cortex.filters" in points and "cortex.weighers" in points
