"""The tests themselves: no clock read when a test module is imported.

A time taken at import (``NOW = datetime.now(UTC)`` at module level, in a default
argument, a decorator or a class body) is as old as the collection when the test
runs: twelve minutes into a full run on two busy cores, a reservation that "expires
in five minutes" has expired, and the test fails only in the full run. Read the
clock inside the test (or a fixture), pass a fixed instant where nothing compares it
with the real clock, or give the code a clock (tests/waiting.py).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]

#: Calls that read the clock, by their full dotted name.
CLOCK_READS = {
    "time.time", "time.time_ns", "time.monotonic", "time.monotonic_ns",
    "time.perf_counter", "time.perf_counter_ns",
    "datetime.datetime.now", "datetime.datetime.utcnow", "datetime.datetime.today",
    "datetime.date.today",
}
#: Method names that read the clock whatever the object is called (an alias not followed).
CLOCK_METHODS = {"now", "utcnow"}


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` of a Name/Attribute chain, None for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _aliases(tree: ast.Module) -> dict[str, str]:
    """``{local name: full dotted name}`` of the module's imports (``import`` and ``from``)."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = \
                    alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _import_time_nodes(tree: ast.Module):
    """Every node evaluated when the module is imported: all but function and lambda bodies.

    A function's decorators and default values are evaluated at import, so are class
    bodies; what runs only when called (a function's body, a lambda's) is skipped.
    """
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            pending += node.decorator_list + node.args.defaults
            pending += [d for d in node.args.kw_defaults if d is not None]
            pending += [node.returns] if node.returns is not None else []
        elif isinstance(node, ast.Lambda):
            pending += node.args.defaults + [d for d in node.args.kw_defaults if d is not None]
        else:
            pending += list(ast.iter_child_nodes(node))


def clock_reads_at_import(source: str, filename: str = "<test>") -> list[str]:
    """``file:line: call`` of every clock read that runs when ``source`` is imported."""
    tree = ast.parse(source, filename)
    aliases = _aliases(tree)
    found = []
    for node in _import_time_nodes(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        if name is None:
            continue
        head, _, rest = name.partition(".")
        full = ".".join(filter(None, (aliases.get(head, head), rest)))
        if full in CLOCK_READS or (isinstance(node.func, ast.Attribute)
                                   and node.func.attr in CLOCK_METHODS):
            found.append(f"{filename}:{node.lineno}: {name}()")
    return found


def test_no_test_module_reads_the_clock_at_import():
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        found += clock_reads_at_import(path.read_text(), str(path.relative_to(TESTS.parent)))
    assert found == [], ("clock read at import; read it in the test or a fixture:\n"
                         + "\n".join(found))


@pytest.mark.parametrize("source", [
    "from datetime import UTC, datetime\nNOW = datetime.now(UTC)\n",
    "import datetime\nNOW = datetime.datetime.now(datetime.UTC)\n",
    "import datetime as dt\nSTART = dt.datetime.utcnow()\n",
    "from datetime import date\nTODAY = date.today()\n",
    "import time\nSTARTED = time.time()\n",
    "from time import monotonic as clock\nSTARTED = clock()\n",
    "import time\ndef helper(deadline=time.monotonic() + 5):\n    return deadline\n",
    "import time\nclass Fake:\n    started = time.perf_counter()\n",
    "import pytest, time\n@pytest.mark.parametrize('t', [time.time()])\ndef test(t):\n    pass\n",
    "import time\nwait = lambda at=time.time(): at\n",
    "from datetime import UTC, datetime, timedelta\nEND = datetime.now(UTC) + timedelta(1)\n",
    "if True:\n    from datetime import datetime\n    CUT = {'at': datetime.now()}\n",
])
def test_the_guard_finds_a_clock_read_at_import(source):
    assert len(clock_reads_at_import(source)) == 1, source


@pytest.mark.parametrize("source", [
    "from datetime import UTC, datetime\ndef test():\n    assert datetime.now(UTC)\n",
    "from datetime import UTC, datetime\nNOW = datetime(2026, 1, 1, tzinfo=UTC)\n",
    "import time\nCLOCK = time.monotonic\n",  # handed over, called later
    "import time\nwait = lambda: time.time()\n",
    "import pytest, time\n@pytest.fixture(scope='module')\ndef start():\n    return time.time()\n",
    "import time\nclass Fake:\n    def now(self):\n        return time.time()\n",
])
def test_the_guard_leaves_reads_at_run_time_alone(source):
    assert clock_reads_at_import(source) == [], source
