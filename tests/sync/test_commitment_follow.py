"""Committed holds follow their instances, through the nova sync and the fake Nova.

A commitment of two instances holds room on cmp0000, where the owner already ran one
VM. The owner boots a VM there: the sync binds it to a hold. Nova live-migrates it to
cmp0001 (the fake's ``os-migrateLive``): the hold goes with it, and cmp0000 keeps the
other hold free, counted once. The VM is deleted: its hold is free again, on cmp0001.
"""

from __future__ import annotations

from datetime import UTC, datetime
from types import MappingProxyType

import requests
from sqlalchemy.orm import Session

from cortex.knowledge.commitments import Commitment, Hold, free_holds
from cortex.knowledge.loader import read_commitments
from cortex.knowledge.view import InstanceSummary
from cortex.store.commitments import save_commitment
from tests.fake_openstack import TOKEN, now_iso
from tests.sync.test_nova import nova

OWNER = "owner-project"
OLD_VM = "00000000-0000-4000-8000-0000000000aa"
NEW_VM = "00000000-0000-4000-8000-0000000000bb"


def holds_of(engine) -> dict[str, Hold]:
    with Session(engine) as session:
        (commitment,) = read_commitments(session)
    return {h.id: h for h in commitment.holds}, commitment


def free_after(engine, hosts: dict[str, tuple[str, ...]]) -> list[str]:
    """The free holds' hosts, the owner's instances on each host as given."""
    _, commitment = holds_of(engine)

    class State:
        def __init__(self, uuids):
            self.instances = tuple(InstanceSummary(u, OWNER) for u in uuids)

    return sorted(h.host for h in free_holds(commitment, {h: State(u) for h, u in hosts.items()}))


def test_a_hold_follows_its_instance_through_a_live_migration(openstack, sync_engine,
                                                               sync_database_url):
    cloud = openstack.cloud
    for host in ("cmp0000", "cmp0001"):
        cloud.add_compute_host(host)
    cloud.add_server(OLD_VM, "cmp0000", tenant_id=OWNER, created="2026-01-01T00:00:00Z")
    now = datetime(2026, 11, 26, tzinfo=UTC)
    holds = tuple(Hold(f"hold-{i}", "c-1", "cmp0000", MappingProxyType({"VCPU": 8}), (), 1)
                  for i in range(2))
    with sync_engine.begin() as connection:
        save_commitment(connection, Commitment(
            "c-1", OWNER, "az-1", 8, 1024, 0, (), 2, now, datetime(2099, 1, 1, tzinfo=UTC),
            now, None, holds))

    assert nova(sync_engine, openstack, sync_database_url).ok
    assert all(h.instance_uuid is None for h in holds_of(sync_engine)[0].values())

    cloud.add_server(NEW_VM, "cmp0000", tenant_id=OWNER, created=now_iso(), updated=now_iso())
    assert nova(sync_engine, openstack, sync_database_url).ok
    bound = [h for h in holds_of(sync_engine)[0].values() if h.instance_uuid]
    assert [(h.instance_uuid, h.host) for h in bound] == [(NEW_VM, "cmp0000")]
    # the older VM was there when the hold was made: it takes none
    assert free_after(sync_engine, {"cmp0000": (OLD_VM, NEW_VM)}) == ["cmp0000"]

    moved = requests.post(f"{openstack.url}/compute/v2.1/servers/{NEW_VM}/action",
                          json={"os-migrateLive": {"host": "cmp0001", "block_migration": "auto"}},
                          headers={"X-Auth-Token": TOKEN,
                                   "OpenStack-API-Version": "compute 2.96"}, timeout=10)
    assert moved.status_code == 202
    requests.get(f"{openstack.url}/compute/v2.1/servers/{NEW_VM}",
                 headers={"X-Auth-Token": TOKEN}, timeout=10)  # the move ends on this read
    assert nova(sync_engine, openstack, sync_database_url).ok
    bound = [h for h in holds_of(sync_engine)[0].values() if h.instance_uuid]
    assert [(h.instance_uuid, h.host) for h in bound] == [(NEW_VM, "cmp0001")]
    # cmp0000 keeps one free hold (the old VM is its baseline), cmp0001's is taken
    assert free_after(sync_engine, {"cmp0000": (OLD_VM,), "cmp0001": (NEW_VM,)}) == [
        "cmp0000"]

    cloud.delete_server(NEW_VM)
    assert nova(sync_engine, openstack, sync_database_url).ok
    after = holds_of(sync_engine)[0]
    assert all(h.instance_uuid is None for h in after.values())
    assert sorted(h.host for h in after.values()) == ["cmp0000", "cmp0001"]
    assert free_after(sync_engine, {"cmp0000": (OLD_VM,), "cmp0001": ()}) == [
        "cmp0000", "cmp0001"]
