"""Imports only go downwards (architecture.md): api -> pipeline -> plugins -> knowledge -> db."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "cortex"
# For each layer, the cortex packages it must never import.
FORBIDDEN = {
    "db": {"api", "pipeline", "plugins", "knowledge", "request", "cmd"},
    "knowledge": {"api", "pipeline", "plugins", "cmd"},
    "plugins": {"api", "pipeline", "db", "cmd"},
    "pipeline": {"api", "db", "cmd"},
    "request": {"api", "pipeline", "plugins", "knowledge", "db", "cmd"},
    "api": {"cmd", "sync"},
    "agent": {"api", "pipeline", "plugins", "knowledge", "db", "request", "cmd", "sync"},
}
THIRD_PARTY_FORBIDDEN = {"plugins": {"sqlalchemy"}, "request": {"sqlalchemy", "flask"},
                         "agent": {"sqlalchemy", "flask"}}


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
