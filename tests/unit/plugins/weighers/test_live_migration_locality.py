"""weigher_live_migration_locality: the share of the source's aggregates kept."""

import pytest

from cortex.plugins.weighers.live_migration_locality import LiveMigrationLocalityWeigher
from tests.fakes import aggregate, host, nova, view
from tests.unit.plugins.weighers.weighing import make, weight

AZ = aggregate("az", az="az-1")
RACK, GPU = aggregate("rack-1"), aggregate("gpu-a100")


def live(source="src"):
    return nova("cpu-live-migrate", spec={"scheduler_hints": {
        "_nova_check_type": ["live_migrate"], "source_host": [source]}})


@pytest.mark.parametrize("target_aggregates, expected", [
    ((AZ, RACK, GPU), 1.0),
    ((AZ, RACK), 0.5),
    ((AZ,), 0.0),                                    # the zone alone does not count
    ((), 0.0),
])
def test_live_migration_locality(target_aggregates, expected):
    source = host("src", aggregates=(AZ, RACK, GPU))
    target = host("t", aggregates=target_aggregates)
    plugin = LiveMigrationLocalityWeigher()
    assert plugin.applies(live())
    assert weight(plugin, target, live(), view(source, target)) == expected


def test_live_migration_locality_counting_zones_and_unknown_sources():
    source = host("src", aggregates=(AZ, RACK))
    target = host("t", aggregates=(AZ,))
    zones = make(LiveMigrationLocalityWeigher, ignore_zones=False)
    assert weight(zones, target, live(), view(source, target)) == 0.5
    assert weight(LiveMigrationLocalityWeigher(), target, live("gone"), view(target)) == 0.0
    assert not LiveMigrationLocalityWeigher().applies(nova())
