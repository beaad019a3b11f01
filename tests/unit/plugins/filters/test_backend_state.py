"""filter_backend_state: pools whose backend is down."""

import pytest

from cortex.plugins.filters.backend_state import BackendStateFilter
from tests.fakes import pool
from tests.unit.plugins.storage import typed, verdict


@pytest.mark.parametrize("state, expected", [
    ("up", None), ("down", "backend_state is down"), ("DOWN", "backend_state is down"),
    (None, None),
])
def test_backend_state(state, expected):
    capabilities = {"backend_state": state} if state else {}
    assert verdict(BackendStateFilter(), pool("p", capabilities=capabilities),
                   typed("cinder", {})) == expected
