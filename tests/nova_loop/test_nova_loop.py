"""Nova 34 schedules GPU VMs through Cortex: every flow end to end through Nova's REST API.

Nova's API, conductor, scheduler and four fake-libvirt computes run in the driver
process (``nova_driver.py``), its scheduler's external hook calling the real Cortex
(gunicorn, PostgreSQL) that cortex-sync filled from that very Nova and Placement. Each
test checks what Nova did (the server's host, its state, Placement's allocation) against
what Cortex answered (the hook's record of the call) and recorded (the decision, the
in-flight reservation).
"""

from __future__ import annotations

import os
import subprocess
import sys

from sqlalchemy import text

from tests.nova_loop import fleet

H100X2 = dict(vcpus=4, ram=4096, hw__cpu_policy="dedicated", hw__mem_page_size="1GB",
              pci_passthrough__alias="h100:2")
H100X1 = dict(vcpus=2, ram=2048, hw__cpu_policy="dedicated", hw__mem_page_size="1GB",
              pci_passthrough__alias="h100:1")


def host_of(server: dict) -> str:
    return server["OS-EXT-SRV-ATTR:host"]


def assert_promise_kept(loop, promise: dict, server: dict, devices: str = "placement") -> None:
    """Cortex's in-flight reservation for ``server`` is what Placement allocated to it.

    The same host, the allocation's classes in the host's provider tree (VGPU included)
    as the reservation's ``resources``, and as many promised GPUs as PCI providers
    Placement allocated (``devices="tracker"``: as
    the host's PCI tracker holds, the server alone on it). Not which GPUs: with PCI
    in Placement, nova-compute hands out the devices of Placement's first allocation
    candidate that passes Nova's filters, an order Placement does not define (see
    docs/nova-in-the-loop.md), while Cortex predicts the PCI tracker's choice.
    """
    roots = loop.nova.call("state")["providers"]
    host = host_of(server)
    tree = {p["uuid"] for p in loop.nova.placement(
        f"/resource_providers?in_tree={roots[host]}")["resource_providers"]}
    allocation = {rp: amounts for rp, amounts in loop.allocation(server["id"]).items()
                  if rp in tree}
    assert promise["host"] == host, (promise, host)
    summed: dict[str, int] = {}
    for amounts in allocation.values():
        for rc, amount in amounts.items():
            if not rc.startswith("CUSTOM_PCI_"):  # Cortex promises those as GPUs
                summed[rc] = summed.get(rc, 0) + amount
    assert promise["resources"] == summed, (promise, allocation)
    if devices == "tracker":  # what nova-compute's PCI tracker handed out on the host
        held = len(loop.nova.call("usage", host=host)["pci_in_use"])
    else:
        held = sum(amount for rp, amounts in allocation.items() if rp != roots[host]
                   for rc, amount in amounts.items() if rc.startswith("CUSTOM_PCI_"))
    assert len(promise["gpus"]) == held, (promise, allocation)


def answered_call(calls: list[dict], server: dict) -> dict:
    """The one hook call Cortex answered for ``server``."""
    mine = [c for c in calls if c["instance_uuid"] == server["id"]]
    assert len(mine) == 1, mine
    return mine[0]


def test_cortex_sync_builds_the_knowledge_from_nova_and_placement(world, loop_database,
                                                                 clouds):
    """``cortex-manage sync`` (the sync's own command) reads the harness's Nova and
    Placement over HTTP; the knowledge tables then hold the fleet as Nova runs it."""
    env = os.environ | {"CORTEX_DATABASE_CONNECTION": loop_database,
                        "CORTEX_OPENSTACK_CLOUD": "nova-loop",
                        "CORTEX_SYNC_SOURCES": "nova,placement",
                        "OS_CLIENT_CONFIG_FILE": str(clouds)}
    env.pop("CORTEX_CONFIG_FILE", None)
    done = subprocess.run([sys.executable, "-m", "cortex.cmd.manage", "sync", "--once"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert {line.split(":")[0] for line in done.stdout.splitlines()} == {"nova", "placement"}
    with world.engine.connect() as connection:
        hypervisors = connection.execute(text(
            "SELECT host, node, hypervisor_type, zone, status, state FROM hypervisors"
            " ORDER BY host")).all()
        providers = dict(connection.execute(text(
            "SELECT name, parent_provider_uuid IS NULL FROM resource_providers")).all())
        pci = connection.execute(text(
            "SELECT p.name, i.resource_class, i.total FROM provider_inventories i"
            " JOIN resource_providers p ON p.uuid = i.provider_uuid"
            " WHERE i.resource_class LIKE 'CUSTOM_PCI_%' ORDER BY p.name")).all()
        aggregates = dict(connection.execute(text(
            "SELECT name, availability_zone FROM aggregates")).all())
    assert [h.host for h in hypervisors] == sorted(fleet.HOSTS)
    assert {(h.node, h.hypervisor_type, h.zone, h.status, h.state) for h in hypervisors} == {
        (host, "QEMU", fleet.ZONE, "enabled", "up") for host in fleet.HOSTS}
    assert {name for name, root in providers.items() if root} == set(fleet.HOSTS)
    expected = sorted((f"{host}_{address}", f"CUSTOM_PCI_{fleet.MODELS[model][0].upper()}_"
                       f"{fleet.MODELS[model][1].upper()}", 1)
                      for host, gpus in fleet.HOSTS.items() for model, address, _ in gpus)
    assert sorted((n.lower(), rc, total) for n, rc, total in pci) == expected
    assert aggregates == {fleet.ZONE: fleet.ZONE, "gpu-h100": None, "gpu-a100": None}


def test_gpu_vms_land_on_cortex_first_choice_until_the_h100s_are_full(loop):
    """2x H100, pinned CPUs, 1 GiB pages, the alias's ``required`` NUMA policy: four VMs
    fill the two H100 hosts (one per NUMA node); each lands on the host Cortex put
    first, which Cortex promised with the resources Placement then allocated. The fifth
    finds no H100 in Placement: NoValidHost without a call to Cortex."""
    flavor = loop.flavor("h100x2", **H100X2)
    mark = loop.mark()
    placed = []
    for index in range(4):
        server = loop.boot(flavor, name=f"gpu{index}")[0]
        call = answered_call(loop.calls(mark), server)
        assert call["answer"] and host_of(server) == call["answer"][0], call
        assert set(call["offered"]) <= set(fleet.GPU_HOSTS) - {"cmp-a100-1"}
        decision = loop.cortex.decision(call["decision_id"])
        assert decision["intent"] == "create"
        assert decision["pipeline"] == "kvm-gpu-topology-aware"
        assert decision["result"] == call["answer"]
        placed.append(server)
    assert sorted(host_of(s) for s in placed) == ["cmp-h100-1"] * 2 + ["cmp-h100-2"] * 2
    promised = {r["instance_uuid"]: r for r in loop.cortex.reservations()}
    for server in placed:
        assert_promise_kept(loop, promised[server["id"]], server)
    before = loop.mark()
    refused = loop.boot(flavor, name="gpu4", expect="ERROR")[0]
    assert "No valid host" in refused["fault"]["message"]
    assert loop.calls(before) == []


H100X4_TWO_NODES = dict(vcpus=8, ram=8192, hw__cpu_policy="dedicated",
                       hw__mem_page_size="1GB", hw__numa_nodes="2",
                       pci_passthrough__alias="h100:4")


def test_two_node_guests_take_whole_h100_hosts(loop):
    """4x H100 in a guest of two NUMA nodes (pinned, 1 GiB pages): one per H100 host, each
    on Cortex's first choice with its promise kept; a third finds no H100 in Placement."""
    flavor = loop.flavor("h100x4-2n", **H100X4_TWO_NODES)
    mark = loop.mark()
    servers = [loop.boot(flavor, name=f"wide{i}")[0] for i in range(2)]
    assert sorted(host_of(s) for s in servers) == ["cmp-h100-1", "cmp-h100-2"]
    promised = {r["instance_uuid"]: r for r in loop.cortex.reservations()}
    for server in servers:
        assert host_of(server) == answered_call(loop.calls(mark), server)["answer"][0]
        assert_promise_kept(loop, promised[server["id"]], server)
    refused = loop.boot(flavor, name="wide2", expect="ERROR")[0]
    assert "No valid host" in refused["fault"]["message"]


def test_cortex_refusal_is_no_valid_host(loop):
    """The agents report every H100 broken (an XID error Nova does not see): Nova's filters
    keep both H100 hosts, Cortex answers ``[]``, and the build fails with NoValidHost."""
    for host in ("cmp-h100-1", "cmp-h100-2"):
        loop.report(host, healthy=False)
    loop.settle()
    mark = loop.mark()
    server = loop.boot(loop.flavor("h100x1", **H100X1), name="refused", expect="ERROR")[0]
    assert "No valid host" in server["fault"]["message"]
    call = answered_call(loop.calls(mark), server)
    assert sorted(call["offered"]) == ["cmp-h100-1", "cmp-h100-2"]
    assert call["answer"] == [] and call["fallback"] is None
    decision = loop.cortex.decision(call["decision_id"])
    assert decision["result"] == []
    health = [s for s in decision["steps"] if s["name"] == "filter_gpu_health"][0]
    assert sorted(health["removed"]) == ["cmp-h100-1", "cmp-h100-2"]
    assert not [r for r in loop.cortex.reservations() if r["instance_uuid"] == server["id"]]


def test_multi_create_places_every_instance_on_cortex_first_choice(loop):
    """``min_count=2, max_count=3`` of 2x H100: Nova asks Cortex once per instance (and
    once more for the alternates); every instance lands where its call put it first."""
    mark = loop.mark()
    servers = loop.boot(loop.flavor("h100x2", **H100X2), name="multi", min_count=2,
                        max_count=3)
    assert len(servers) == 3
    calls = loop.calls(mark)
    promised = {r["instance_uuid"]: r for r in loop.cortex.reservations()}
    for server in servers:
        first = [c for c in calls if c["instance_uuid"] == server["id"]][0]
        assert host_of(server) == first["answer"][0], (server["id"], calls)
        assert_promise_kept(loop, promised[server["id"]], server)
    assert len({c["decision_id"] for c in calls}) == len(calls) >= 3


def test_multi_create_beyond_capacity_is_refused_whole(loop):
    """``min_count=5`` of 2x H100 where four fit: Cortex plans the whole group at the
    first member's call, finds room for four and answers ``[]`` (all or nothing); Nova
    fails the request, five servers in ERROR, nothing allocated and nothing promised."""
    mark = loop.mark()
    servers = loop.boot(loop.flavor("h100x2", **H100X2), name="toomany", min_count=5,
                        expect="ERROR")
    assert len(servers) == 5
    assert all("No valid host" in s["fault"]["message"] for s in servers)
    assert all(loop.allocation(s["id"]) == {} for s in servers)
    calls = loop.calls(mark)
    assert len(calls) == 1 and calls[0]["answer"] == [], calls
    decision = loop.cortex.decision(calls[0]["decision_id"])
    promise = [s for s in decision["steps"] if s["name"] == "inflight_reservations"][0]
    assert "4 of 5 members fit" in promise["detail"], promise
    ids = {s["id"] for s in servers}
    assert not [r for r in loop.cortex.reservations() if r["instance_uuid"] in ids]


def test_a_failed_claim_on_cortex_first_choice_lands_on_its_alternate(loop):
    """nova-compute on Cortex's first host refuses the claim (a concurrent claim took
    the room): the conductor retries the next host of Cortex's order, without asking
    the scheduler again; Cortex's promise stays on the first host until the sync shows
    the instance elsewhere."""
    loop.nova.call("fail_claims", host="*", count=1)
    mark = loop.mark()
    server = loop.boot(loop.flavor("h100x1", **H100X1), name="retried")[0]
    call = answered_call(loop.calls(mark), server)
    assert len(call["answer"]) == 2 and host_of(server) == call["answer"][1], call
    promise = [r for r in loop.cortex.reservations() if r["instance_uuid"] == server["id"]]
    assert [r["host"] for r in promise] == [call["answer"][0]]
    roots = loop.nova.call("state")["providers"]
    assert roots[host_of(server)] in loop.allocation(server["id"])


def test_a_claim_lost_in_placement_goes_to_the_next_host_of_cortex_order(loop):
    """Another consumer takes the memory of Cortex's first host in Placement right after
    Cortex answered: the scheduler's claim there fails (409) and it claims the next
    host of Cortex's order."""
    loop.nova.call("race")
    mark = loop.mark()
    server = loop.boot(loop.flavor("h100x1", **H100X1), name="raced")[0]
    call = answered_call(loop.calls(mark), server)
    assert call["raced"] == call["answer"][0] and host_of(server) == call["answer"][1], call


def test_anti_affinity_group_members_land_apart(loop):
    """A multi-create into an anti-affinity server group: Cortex plans both members on
    different hosts, Nova places each where its call put it first; a third member finds
    no host (Nova's own filter leaves none to ask Cortex about)."""
    group = loop.nova.call("group", name="apart", policy="anti-affinity")
    flavor = loop.flavor("h100x1", **H100X1)
    mark = loop.mark()
    servers = loop.boot(flavor, name="apart", min_count=2, group=group["id"])
    calls = loop.calls(mark)
    assert len({host_of(s) for s in servers}) == 2
    for server in servers:
        first = [c for c in calls if c["instance_uuid"] == server["id"]][0]
        assert host_of(server) == first["answer"][0], calls
    before = loop.mark()
    third = loop.boot(flavor, name="apart3", group=group["id"], expect="ERROR")[0]
    assert "No valid host" in third["fault"]["message"]
    assert loop.calls(before) == []


#: How a moved GPU VM's devices are counted. Nova 34 with PCI in Placement: on a resize,
#: cold migration or evacuation the destination's PCI claim may take other devices than
#: the scheduler allocated in Placement (the ones its NUMA fit picks), and the resource
#: tracker then adds those to the allocation, which so holds more devices than the guest
#: (docs/nova-in-the-loop.md). The guest's devices are what the host's PCI tracker holds.
MOVED_DEVICES = "tracker"


def test_server_group_rules_hold_for_whole_groups(loop):
    """Anti-affinity with ``max_server_per_host=2``: four 1x H100 members, two per H100
    host; affinity: two members on one host. Every member on its call's first host."""
    flavor = loop.flavor("h100x1", **H100X1)
    for policy, rules, count in (("anti-affinity", {"max_server_per_host": 2}, 4),
                                 ("affinity", None, 2)):
        group = loop.nova.call("group", name=policy, policy=policy, rules=rules)
        mark = loop.mark()
        servers = loop.boot(flavor, name=policy, min_count=count, group=group["id"])
        calls = loop.calls(mark)
        hosts = sorted(host_of(s) for s in servers)
        if policy == "affinity":
            assert len(set(hosts)) == 1, hosts
        else:
            assert hosts == ["cmp-h100-1"] * 2 + ["cmp-h100-2"] * 2, hosts
        for server in servers:
            first = [c for c in calls if c["instance_uuid"] == server["id"]][0]
            assert host_of(server) == first["answer"][0], (policy, calls)
        loop.nova.call("delete", servers=[s["id"] for s in servers])


def newest_promise(loop, server: dict) -> dict:
    promises = [r for r in loop.cortex.reservations() if r["instance_uuid"] == server["id"]]
    return max(promises, key=lambda r: r["created_at"])


def move_call(loop, mark: int, server: dict, check_type: str) -> dict:
    """The one hook call of a move, its flags as SAP's hook sets them for ``check_type``."""
    calls = [c for c in loop.calls(mark) if c["instance_uuid"] == server["id"]]
    assert len(calls) == 1, calls
    call = calls[0]
    assert call["check_type"] == [check_type], call
    assert call["flags"] == {"rebuild": check_type == "rebuild",
                             "resize": check_type == "resize",
                             "live": check_type == "live_migrate", "vmware": True}, call
    return call


def test_resize_goes_where_cortex_says_with_the_resize_intent(loop):
    """Resize 1x H100 to 2x H100: Nova asks with ``_nova_check_type=resize``; Cortex
    records the intent, the VM moves to its first host and Cortex's promise is the new
    flavor's allocation there."""
    server = loop.boot(loop.flavor("h100x1", **H100X1), name="grow")[0]
    source = host_of(server)
    mark = loop.mark()
    resized = loop.move("resize", server=server["id"],
                             flavor=loop.flavor("h100x2", **H100X2))
    call = move_call(loop, mark, server, "resize")
    assert source not in call["offered"]
    assert host_of(resized) == call["answer"][0] and resized["flavor"]["original_name"] == \
        "h100x2"
    assert loop.cortex.decision(call["decision_id"])["intent"] == "resize"
    assert_promise_kept(loop, newest_promise(loop, server), resized, devices=MOVED_DEVICES)


def test_cold_migration_follows_cortex_with_the_resize_intent(loop):
    """Cold migration (no host given): SAP's Nova flags it as a resize, Cortex answers the
    other H100 host, the VM goes there and is confirmed."""
    server = loop.boot(loop.flavor("h100x1", **H100X1), name="cold")[0]
    mark = loop.mark()
    moved = loop.move("migrate", server=server["id"])
    call = move_call(loop, mark, server, "resize")
    assert host_of(moved) == call["answer"][0] != host_of(server)
    assert moved["status"] == "ACTIVE"
    assert loop.cortex.decision(call["decision_id"])["intent"] == "resize"
    assert_promise_kept(loop, newest_promise(loop, server), moved, devices=MOVED_DEVICES)


NUMA_PINNED = dict(vcpus=2, ram=2048, hw__cpu_policy="dedicated", hw__mem_page_size="1GB")


def test_live_migration_follows_cortex_with_the_live_migrate_intent(loop):
    """A pinned, 1 GiB-page VM (no GPU: Nova live-migrates no PCI device) is
    live-migrated without a host: Nova asks with ``_nova_check_type=live_migrate``
    and ``source_host``; the VM moves to Cortex's first host."""
    server = loop.boot(loop.flavor("numa2", **NUMA_PINNED), name="live")[0]
    mark = loop.mark()
    moved = loop.move("live_migrate", server=server["id"])
    call = move_call(loop, mark, server, "live_migrate")
    assert host_of(server) not in call["offered"]
    assert host_of(moved) == call["answer"][0]
    decision = loop.cortex.decision(call["decision_id"])
    assert decision["intent"] == "live_migrate"
    assert_promise_kept(loop, newest_promise(loop, server), moved)


def test_evacuation_follows_cortex_with_the_evacuate_intent(loop):
    """The VM's compute goes down (stopped, forced down); the evacuation asks Cortex
    with ``_nova_check_type=evacuate`` and rebuilds the VM on its first host."""
    server = loop.boot(loop.flavor("h100x1", **H100X1), name="evacuee")[0]
    mark = loop.mark()
    moved = loop.move("evacuate", server=server["id"])
    call = move_call(loop, mark, server, "evacuate")
    assert host_of(server) not in call["offered"]
    assert host_of(moved) == call["answer"][0]
    assert loop.cortex.decision(call["decision_id"])["intent"] == "evacuate"
    assert_promise_kept(loop, newest_promise(loop, server), moved, devices=MOVED_DEVICES)


def test_rebuild_with_a_new_image_is_checked_on_its_own_host(loop):
    """A rebuild with another image: Nova asks about the VM's own host only
    (``_nova_check_type=rebuild``, ``force_hosts``); Cortex keeps it, nothing promised."""
    server = loop.boot(loop.flavor("h100x1", **H100X1), name="rebuilt")[0]
    images = loop.nova.call("images")["images"]
    other = next(i for i in images if i != server["image"]["id"])
    mark = loop.mark()
    rebuilt = loop.move("rebuild", server=server["id"], image=other)
    call = move_call(loop, mark, server, "rebuild")
    assert call["offered"] == call["answer"] == [host_of(server)] == [host_of(rebuilt)]
    assert rebuilt["image"]["id"] == other
    assert loop.cortex.decision(call["decision_id"])["intent"] == "rebuild"
    assert len([r for r in loop.cortex.reservations()
                if r["instance_uuid"] == server["id"]]) == 1  # the create's only


def test_the_descheduler_moves_a_vm_through_nova(loop, clouds):
    """cortex-descheduler's executor (NovaMover, openstacksdk on Nova's API) cold-migrates
    a GPU VM to a named host: Nova's scheduler asks Cortex about that host alone
    (requested destination, ``resize`` intent) and the executor confirms the move."""
    import openstack

    from cortex.descheduler.nova import NovaMover

    server = loop.boot(loop.flavor("h100x1", **H100X1), name="drained")[0]
    source = host_of(server)
    target = next(h for h in ("cmp-h100-1", "cmp-h100-2") if h != source)
    mark = loop.mark()
    mover = NovaMover(openstack.connect(cloud="nova-loop"), timeout=60, poll_interval=0.2)
    outcome = mover.move(server["id"], source, target, "cold")
    assert (outcome.state, outcome.detail) == (
        "completed", f"cold-migrated to {target} and confirmed"), loop.explain()
    moved = loop.nova.call("show", server=server["id"])
    assert (host_of(moved), moved["status"]) == (target, "ACTIVE")
    call = move_call(loop, mark, server, "resize")
    assert call["offered"] == call["answer"] == [target]
    assert loop.cortex.decision(call["decision_id"])["intent"] == "resize"


def test_deleted_vms_free_their_gpus_for_cortex_too(loop):
    """Four 2x H100 VMs fill the H100 hosts, are synced, deleted and synced again: Placement
    shows every H100 free, and the next 2x H100 VM must find a host."""
    flavor = loop.flavor("h100x2", **H100X2)
    servers = [loop.boot(flavor, name=f"brief{i}")[0] for i in range(4)]
    loop.refresh()
    loop.nova.call("delete", servers=[s["id"] for s in servers])
    loop.refresh()
    used = loop.nova.placement(
        "/usages?project_id=6f70656e737461636b20342065766572")["usages"]
    assert used.get("CUSTOM_PCI_10DE_2330", 0) == 0
    mark = loop.mark()
    server = loop.boot(flavor, name="after", expect="ACTIVE")[0]
    assert host_of(server) == answered_call(loop.calls(mark), server)["answer"][0]


VGPU = dict(vcpus=2, ram=2048, resources__VGPU="1")


def test_vgpu_vms_land_on_cortex_first_choice(loop):
    """``resources:VGPU=1``: Placement offers the vGPU host alone; Cortex's GPU pipeline
    keeps it (no agent report there: nothing rules it out), Nova creates the mediated
    device, and Cortex's promise holds the allocation's VGPU."""
    mark = loop.mark()
    servers = [loop.boot(loop.flavor("vgpu", **VGPU), name=f"vgpu{i}")[0] for i in range(2)]
    roots = loop.nova.call("state")["providers"]
    promised = {r["instance_uuid"]: r for r in loop.cortex.reservations()}
    for server in servers:
        call = answered_call(loop.calls(mark), server)
        assert call["offered"] == call["answer"] == [host_of(server)] == ["cmp-vgpu-1"]
        decision = loop.cortex.decision(call["decision_id"])
        assert decision["pipeline"] == "kvm-gpu-topology-aware"
        allocation = loop.allocation(server["id"])
        vgpu = {rc: n for rp, amounts in allocation.items() if rp != roots["cmp-vgpu-1"]
                for rc, n in amounts.items()}
        assert vgpu == {"VGPU": 1}
        assert_promise_kept(loop, promised[server["id"]], server)
