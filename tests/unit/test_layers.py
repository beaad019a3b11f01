"""Imports only go downwards (architecture.md): api -> pipeline -> plugins -> knowledge -> db.

``sync -> db`` only: the sync never imports the API, the pipeline, the plugins or the
knowledge layer, and nothing but the console scripts imports the sync. The simulator runs
pipelines in process: it may use the pipeline, plugins, knowledge and requests, never the
API or the database.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "cortex"
# For each layer, the cortex packages it must never import.
FORBIDDEN = {
    "db": {"api", "pipeline", "plugins", "rules", "knowledge", "request", "cmd", "sync",
           "store"},
    "knowledge": {"api", "pipeline", "plugins", "rules", "cmd", "sync", "store"},
    "store": {"api", "pipeline", "plugins", "rules", "cmd", "sync", "simulator", "agent"},
    "plugins": {"api", "pipeline", "db", "cmd", "sync", "store"},
    "rules": {"api", "pipeline", "plugins", "db", "cmd", "sync", "store", "simulator"},
    "pipeline": {"api", "db", "cmd", "sync", "store"},
    "request": {"api", "pipeline", "plugins", "rules", "knowledge", "db", "cmd", "sync",
                "store"},
    "api": {"cmd", "sync"},
    "agent": {"api", "pipeline", "plugins", "rules", "knowledge", "db", "request", "cmd",
              "sync", "store"},
    "sync": {"api", "pipeline", "plugins", "rules", "knowledge", "request", "cmd", "agent"},
    "simulator": {"api", "db", "cmd", "sync", "agent"},
}
THIRD_PARTY_FORBIDDEN = {"plugins": {"sqlalchemy"}, "rules": {"sqlalchemy", "flask"},
                         "request": {"sqlalchemy", "flask"},
                         "agent": {"sqlalchemy", "flask"}, "simulator": {"sqlalchemy", "flask"}}


def imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def layer_files():
    for layer in FORBIDDEN:
        for path in sorted((ROOT / layer).rglob("*.py")):
            yield layer, path


@pytest.mark.parametrize("layer, path", list(layer_files()),
                         ids=lambda v: str(v.relative_to(ROOT)) if isinstance(v, Path) else v)
def test_no_upward_imports(layer, path):
    found = imports(path)
    cortex_layers = {n.split(".")[1] for n in found if n.startswith("cortex.") and "." in n}
    assert not cortex_layers & FORBIDDEN[layer], f"{path} imports {cortex_layers}"
    top = {n.split(".")[0] for n in found}
    assert not top & THIRD_PARTY_FORBIDDEN.get(layer, set()), f"{path} imports {top}"


def test_the_walk_sees_files():
    assert sum(1 for _ in layer_files()) > 20
