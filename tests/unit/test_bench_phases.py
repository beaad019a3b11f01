"""The per-phase benchmark names functions that exist: renaming one must break a test,
not the benchmark the day someone runs it."""

from __future__ import annotations

import importlib
import sys

import pytest

from tests.conftest import REPO


@pytest.fixture(scope="module")
def phases():
    sys.path.insert(0, str(REPO / "bench"))
    try:
        return importlib.import_module("pipeline_steps").PHASES
    finally:
        sys.path.remove(str(REPO / "bench"))


def test_every_phase_names_a_callable_the_call_goes_through(phases):
    for phase, module, attribute in phases:
        owner = importlib.import_module(module)
        for part in attribute.split("."):
            assert hasattr(owner, part), f"{phase}: {module}.{attribute} is gone"
            owner = getattr(owner, part)
        assert callable(owner), f"{phase}: {module}.{attribute} is not callable"


def test_the_phases_cover_the_call_from_body_to_answer(phases):
    named = [phase for phase, _, _ in phases]
    assert named[0] == "body read" and named[-1] == "answer"
    assert {"pipeline", "promise", "overlay", "decision record"} <= set(named)
