"""The house's import rules: layers only import downwards, and no module imports itself back.

The layers and forbidden imports are import-linter contracts in setup.cfg
(``[importlinter:...]``): ``cmd`` above ``api`` and ``sync``, then ``simulator``,
``scheduler``, ``pipeline``, ``plugins``, ``rules``, ``store``, ``knowledge``,
``decision`` and ``request``, ``db``. Cycles are looked for in grimp's import graph of
every module, imports inside functions included.
"""

import subprocess
import sys
from pathlib import Path

import grimp

from tests.conftest import REPO


def cycles(imports: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(imports.get(module, ())):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while component[-1:] != [module]:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(imports):
        if module not in index:
            visit(module)
    return found


def test_the_cycle_finder_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e2"}, "e2": set()}
    assert cycles(graph) == [["a", "b", "c"]]


def test_no_module_imports_itself_back():
    graph = grimp.build_graph("cortex")
    imports = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    assert len(imports) > 100
    assert cycles(imports) == []


def test_the_import_contracts_hold():
    linter = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(linter), "--no-cache"], cwd=REPO, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_handlers_are_held_to_parsing_calling_and_answering():
    """The contract that keeps SQL, the simulator and the plugins out of ``cortex.api``.

    ``test_the_import_contracts_hold`` fails when a handler module imports one of them;
    this test fails when the contract itself is weakened or removed.
    """
    import configparser

    setup = configparser.ConfigParser()
    setup.read(REPO / "setup.cfg")
    contract = setup["importlinter:contract:handlers"]
    assert contract["type"] == "forbidden"
    assert contract["source_modules"].split() == ["cortex.api", "cortex.dashboard"]
    assert {"sqlalchemy", "cortex.simulator", "cortex.plugins"} <= set(
        contract["forbidden_modules"].split())
    shared = setup["importlinter:contract:shared"]
    assert "cortex.log" in shared["source_modules"].split()
    assert shared["forbidden_modules"].split() == ["flask"]
    layers = setup["importlinter:contract:layers"]["layers"]
    for module in ("conf", "log", "ids", "jsontext", "documents", "cli"):
        assert f"cortex.{module}" in layers.replace("|", " ").split()
