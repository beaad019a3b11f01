"""weigher_build_failures: minus the recent build failures."""

from cortex.plugins.weighers.build_failures import BuildFailureWeigher
from tests.fakes import host, nova
from tests.unit.plugins.weighers.weighing import weight


def test_build_failures():
    assert weight(BuildFailureWeigher(), host("h", failed_builds=3), nova()) == -3.0
    assert weight(BuildFailureWeigher(), host("h"), nova()) == 0.0
