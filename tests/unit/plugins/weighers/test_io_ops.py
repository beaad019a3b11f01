"""weigher_io_ops: instances in I/O-heavy operations, scaled."""

import pytest

from cortex.plugins.weighers.io_ops import IoOpsWeigher
from tests.fakes import host, instance, nova
from tests.unit.plugins.weighers.weighing import weight


@pytest.mark.parametrize("instances, expected", [
    ((), 0.0),
    ((instance("a"), instance("b", task_state="image_snapshot")), 0.25),
    ((instance("a", vm_state="building"), instance("b", task_state="resize_migrating"),
      instance("c", task_state="rebuilding"), instance("d", task_state="powering-off")), 0.75),
])
def test_io_ops(instances, expected):
    assert weight(IoOpsWeigher(), host("h", instances=instances), nova()) == expected
