"""Who committed room counts against, and when (cortex.knowledge.commitments)."""

from datetime import UTC, datetime, timedelta

from cortex.knowledge.commitments import (
    Commitment,
    Hold,
    counted_holds,
    free_holds,
    owner_room,
)
from tests.fakes import host, instance

NOW = datetime(2026, 11, 25, 12, tzinfo=UTC)
OWNER, OTHER = "a" * 32, "c" * 32


def commitment(holds, start=NOW - timedelta(days=1), end=NOW + timedelta(days=1)):
    made = [Hold(f"h{i}", "c1", name, {"PCPU": 16}, (f"0000:{i:02x}:00.0",), baseline)
            for i, (name, baseline) in enumerate(holds)]
    return Commitment("c1", OWNER, "az-1", 16, 65536, 1, (), len(made), start, end,
                      start, None, tuple(made))


def hosts(**owned):
    """Host states whose instances include ``owned[name]`` of the owner's."""
    return {name: host(name, instances=[instance(f"{name}-{i}", OWNER) for i in range(n)]
                       + [instance(f"{name}-x", OTHER)]) for name, n in owned.items()}


def test_other_projects_count_every_free_hold_the_owner_none():
    found = commitment([("h1", 0), ("h1", 0), ("h2", 0)])
    counted = counted_holds([found], hosts(h1=0, h2=0), OTHER, NOW)
    assert sorted(r.host for r in counted) == ["h1", "h1", "h2"]
    assert all(r.expires_at == found.end_at and r.instance_uuid is None for r in counted)
    assert counted_holds([found], hosts(h1=0, h2=0), OWNER, NOW) == []
    assert owner_room([found], hosts(h1=0, h2=0), OWNER, NOW) == {"h1": 2, "h2": 1}
    assert owner_room([found], hosts(h1=0, h2=0), OTHER, NOW) == {}


def test_owner_instances_beyond_the_baseline_consume_holds_never_counted_twice():
    found = commitment([("h1", 1), ("h1", 1), ("h2", 0)])
    assert len(free_holds(found, hosts(h1=1, h2=0))) == 3  # the one it had before
    assert sorted(h.host for h in free_holds(found, hosts(h1=2, h2=0))) == ["h1", "h2"]
    assert sorted(h.host for h in free_holds(found, hosts(h1=5, h2=1))) == []
    assert len(counted_holds([found], hosts(h1=2, h2=1), OTHER, NOW)) == 1
    # an owner instance on a host without holds consumes nothing
    assert len(free_holds(found, hosts(h1=1, h2=0, h3=4))) == 3


def test_only_an_active_commitment_holds_room():
    later = commitment([("h1", 0)], start=NOW + timedelta(hours=1))
    over = commitment([("h1", 0)], end=NOW)
    for found, state in ((later, "pending"), (over, "expired")):
        assert found.state(NOW) == state and not found.active(NOW)
        assert counted_holds([found], hosts(h1=0), OTHER, NOW) == []
        assert owner_room([found], hosts(h1=0), OWNER, NOW) == {}
    assert commitment([("h1", 0)]).state(NOW) == "active"
