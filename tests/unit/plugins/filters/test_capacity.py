"""filter_capacity: the pool's free (or thin virtual) capacity."""

import pytest

from cortex.plugins.filters.capacity import CapacityFilter, wants_thin
from tests.fakes import pool
from tests.unit.plugins.storage import typed, verdict


@pytest.mark.parametrize("service, specs, thin", [
    ("cinder", {}, True),                                   # Cinder's default is thin
    ("cinder", {"provisioning:type": "thin"}, True),
    ("cinder", {"provisioning:type": "thick"}, False),
    ("manila", {}, True),                                   # Manila's use_thin_logic
    ("manila", {"thin_provisioning": "<is> True"}, True),
    ("manila", {"thin_provisioning": "True"}, True),
    ("manila", {"thin_provisioning": "<is> False"}, False),
    ("manila", {"capabilities:thin_provisioning": "<is> False"}, False),
])
def test_wants_thin(service, specs, thin):
    assert wants_thin(typed(service, specs)) is thin


def test_manila_capacity_thin_by_default():
    thin = pool("p", total=1000, free=100, provisioned=1000, ratio=2.0, thin=True)
    assert verdict(CapacityFilter(), thin, typed("manila", {}, size=150)) is None
    thick = typed("manila", {"thin_provisioning": "<is> False"}, size=150)
    assert verdict(CapacityFilter(), thin, thick) == "free 100 GiB < 150 GiB"
