"""Groups all or nothing on PostgreSQL: a gang's room promised whole at its first call, or none.

The scheduler service runs in process with the shipped ``kvm-gpu-topology-aware``
pipeline on a view of HGX H100 boards (8 GPUs each) and the session database's
reservation store; each member of a Nova multi-create is its own call, one request id,
as Nova makes them.
"""

from __future__ import annotations

import dataclasses
import threading
from datetime import UTC, datetime, timedelta
from types import MappingProxyType

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import delete, func, select, text

from cortex import conf
from cortex.db import guard, models
from cortex.pipeline.config import load_pipelines
from cortex.scheduler.metrics import SchedulerMetrics
from cortex.scheduler.promise import CLIQUE_LABEL, clique_of, count_expired, gang_of, group_store
from cortex.scheduler.service import RunOptions, SchedulerService, SchedulerSettings
from cortex.store.reservation_rows import LOCK_NAMESPACE
from cortex.store.reservations import ReservationStore
from tests.fakes import ViewCache, nova, view
from tests.gpu_fakes import board_topology, gpu_host

PIPELINES = load_pipelines(conf.shipped_file("pipelines.yaml"))
LIVE = RunOptions(pipeline="kvm-gpu-topology-aware")
BOARD = "hgx-h100-8gpu"


def busy_board(name):
    """A board whose eight GPUs are all in use."""
    full = board_topology(BOARD)
    return gpu_host(name, topology=board_topology(BOARD, in_use=[g.pci_address
                                                                 for g in full.gpus]))


def fleet(free, busy=0):
    """``free`` boards with every GPU free (``g00``...), ``busy`` with none (``b00``...)."""
    return view(*(gpu_host(f"g{i:02d}") for i in range(free)),
                *(busy_board(f"b{i:02d}") for i in range(busy)), service="nova")


@pytest.fixture
def store(engine):
    """The session database's reservation store, its tables emptied before and after."""
    def empty():
        with engine.begin() as connection:
            connection.execute(delete(models.InflightReservation))
            connection.execute(delete(models.GroupPromise))
    empty()
    yield ReservationStore(engine)
    empty()


def service(current, store, ttl=300.0, budget=0.0):
    registry = CollectorRegistry()
    return SchedulerService(PIPELINES, ViewCache(current),
                            SchedulerSettings(reservation_ttl=ttl, request_time_budget=budget),
                            reservations=store, metrics=SchedulerMetrics(registry)), registry


def member(hosts, index, request_id="req-gang", members=4, hints=None):
    """Member ``index`` of a multi-create of ``members`` 8x H100 instances."""
    return nova("gpu-8xh100-full-node", hosts=hosts, flavor={"root_gb": 0},
                spec={"num_instances": members, "instance_uuid": f"{request_id}-i{index}",
                      "scheduler_hints": hints or {}},
                context={"request_id": request_id, "global_request_id": None})


def counted(registry, outcome):
    return registry.get_sample_value("cortex_group_placements_total",
                                     {"service": "nova", "outcome": outcome}) or 0


def stored(engine):
    with engine.connect() as connection:
        return (connection.execute(select(func.count()).select_from(
                    models.InflightReservation)).scalar(),
                connection.execute(select(func.count()).select_from(
                    models.GroupPromise)).scalar())


def test_a_multi_create_is_a_gang_and_a_lone_create_is_not():
    gang = gang_of(member(["g00"], 0))
    assert (gang.key, gang.members, gang.min_count) == ("request:req-gang", 4, 4)
    assert gang_of(member(["g00"], 0, members=1)) is None
    assert gang_of(member(["g00"], 0, hints={"min_count": ["2"]})).min_count == 2
    assert gang_of(member(["g00"], 0, hints={"min_count": ["9"]})).min_count == 4
    sized = gang_of(nova(
        "multi-create-anti-affinity", spec={"num_instances": 1,
                                            "scheduler_hints": {"group_size": ["3"]}}))
    assert (sized.key, sized.members, sized.policy) == (
        "hint:pppppppppppppppppppppppppppppppp/ab5be801-4e02-4d5c-bd67-37562e66ba54", 3,
        "anti-affinity")
    assert gang_of(nova("multi-create-anti-affinity", spec={"num_instances": 1})) is None


def test_four_boards_asked_three_free_is_refused_at_the_first_call(store, engine):
    current = fleet(free=3, busy=1)
    hosts = list(current.hosts)
    scheduler, registry = service(current, store)
    decision = scheduler.schedule(member(hosts, 0), LIVE)
    assert decision.result == ()
    assert stored(engine) == (0, 0)
    assert counted(registry, "refused_whole") == 1
    step = decision.steps[-1]
    assert step.name == "inflight_reservations" and "3 of 4 members fit" in step.detail


def test_four_boards_free_the_four_calls_get_four_distinct_promised_boards(store, engine):
    current = fleet(free=4, busy=2)
    hosts = list(current.hosts)
    scheduler, registry = service(current, store)
    first = scheduler.schedule(member(hosts, 0), LIVE)
    assert stored(engine) == (4, 1)  # every member's room at the first call
    promised = group_store(store).find("request:req-gang", datetime.now(UTC))
    assert promised.placed == 4 and len(set(promised.hosts)) == 4
    assert set(promised.hosts) == {"g00", "g01", "g02", "g03"}
    assert '"members": 4' in first.steps[-1].detail
    answers = [first.result[0]] + [scheduler.schedule(member(hosts, i), LIVE).result[0]
                                   for i in (1, 2, 3)]
    assert answers == list(promised.hosts)
    assert counted(registry, "placed") == 1
    slots = group_store(store).slots(promised, datetime.now(UTC))
    assert sorted(s.instance_uuid for s in slots) == [f"req-gang-i{i}" for i in range(4)]
    assert stored(engine) == (4, 1)  # the members took their slots, nothing more


def test_a_member_asking_again_gets_its_own_board(store):
    current = fleet(free=4)
    hosts = list(current.hosts)
    scheduler, _ = service(current, store)
    first = scheduler.schedule(member(hosts, 0), LIVE).result[0]
    second = scheduler.schedule(member(hosts, 1), LIVE).result[0]
    assert scheduler.schedule(member(hosts, 1), LIVE).result[0] == second != first


def test_a_min_count_group_is_promised_with_the_members_that_fit(store, engine):
    current = fleet(free=3, busy=1)
    scheduler, registry = service(current, store)
    decision = scheduler.schedule(member(list(current.hosts), 0,
                                         hints={"min_count": ["3"]}), LIVE)
    assert decision.result[0].startswith("g")
    assert stored(engine) == (3, 1)
    assert counted(registry, "placed") == 1


def test_unclaimed_slots_expire_and_are_counted(store, engine):
    current = fleet(free=4)
    scheduler, registry = service(current, store, ttl=60)
    scheduler.schedule(member(list(current.hosts), 0), LIVE)
    later = datetime.now(UTC) + timedelta(seconds=120)
    metrics = scheduler.metrics
    assert count_expired(group_store(store), later, metrics) == 1
    assert counted(registry, "expired") == 1
    assert store.active(later) == []


def test_fifty_concurrent_groups_for_room_that_holds_ten_never_over_promise(store, engine):
    """Twenty boards: room for ten groups of two 8-GPU members; each worker has its own
    view of no reservation, so only the locks keep them from promising a board twice.
    The calls' budget is long: the fifty wait for each other's locks in one process, and
    on a busy machine the default's 5 s could run out (a call then answers unpromised)."""
    current = fleet(free=20)
    hosts = list(current.hosts)
    barrier = threading.Barrier(50)
    answers, errors = [], []

    def one(i):
        scheduler, _ = service(current, store, budget=120.0)
        barrier.wait()
        try:
            answers.append(scheduler.schedule(member(hosts, 0, request_id=f"req-{i:02d}",
                                                     members=2), LIVE).result)
        except Exception as exc:  # noqa: BLE001 - the assert below names it
            errors.append(exc)

    workers = [threading.Thread(target=one, args=(i,)) for i in range(50)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert errors == []
    placed = [a for a in answers if a]
    assert len(placed) == 10 and len(answers) == 50
    rows = store.active(datetime.now(UTC))
    assert len(rows) == 20 and len({r.host for r in rows}) == 20  # one 8-GPU member a board


@pytest.mark.parametrize("members", [2, 1], ids=["group", "lone-create"])
def test_hosts_locked_past_the_budget_leave_the_database_up(store, engine, members):
    """Contention is not an outage: the server refuses a lock held too long (a group's
    locks, a lone create's in the promise's function) before the watchdog fires."""
    current = fleet(free=members)
    hosts = list(current.hosts)
    scheduler, _ = service(current, store, budget=1.0)
    state = guard.health(engine)
    with engine.connect() as holder, holder.begin():
        for host in hosts:
            holder.execute(text("SELECT pg_advisory_xact_lock(:ns, hashtext(:host))"),
                           {"ns": LOCK_NAMESPACE, "host": host})
        decision = scheduler.schedule(member(hosts, 0, members=members), LIVE)
    step = decision.steps[-1]
    assert step.status == "error" and "LockNotAvailable" in step.reason
    assert decision.result[0] in hosts  # the answer stands, unpromised
    assert not state.down
    assert stored(engine) == (0, 0)


def test_a_member_offered_no_promised_board_frees_one_slot_and_is_promised_alone(store):
    current = fleet(free=4)
    hosts = list(current.hosts)
    scheduler, _ = service(current, store)
    scheduler.schedule(member(hosts, 0, members=2), LIVE)
    promised = group_store(store).find("request:req-gang", datetime.now(UTC))
    assert promised.hosts == ("g00", "g01")
    elsewhere = [h for h in hosts if h not in promised.hosts]
    answer = scheduler.schedule(member(elsewhere, 1, members=2), LIVE).result
    assert answer[0] in elsewhere
    held = sorted((r.host, r.instance_uuid) for r in store.active(datetime.now(UTC)))
    assert held == sorted([("g00", "req-gang-i0"), (answer[0], "req-gang-i1")])


def cpu_member(hosts, index, policy, members=4, per_host="1"):
    """Member ``index`` of a multi-create of small CPU instances in a server group."""
    group = {"uuid": "sg-1", "policy": policy, "members": [], "hosts": [],
             "_rules": {"max_server_per_host": per_host}}
    return nova("cpu-general-purpose", hosts=hosts, flavor={"root_gb": 0},
                spec={"num_instances": members, "instance_uuid": f"req-sg-i{index}",
                      "instance_group": {"nova_object.data": group}},
                context={"request_id": "req-sg", "global_request_id": None})


@pytest.mark.parametrize(("policy", "per_host", "free", "spread"), [
    ("anti-affinity", "1", 4, 4), ("anti-affinity", "2", 2, 2), ("affinity", "1", 4, 1)])
def test_a_server_groups_policy_holds_for_the_whole_plan(store, policy, per_host, free, spread):
    current = fleet(free=free)
    scheduler, _ = service(current, store)
    decision = scheduler.schedule(cpu_member(list(current.hosts), 0, policy,
                                             per_host=per_host), LIVE)
    assert decision.result
    promised = group_store(store).find("request:req-sg", datetime.now(UTC))
    assert promised.placed == 4 and len(set(promised.hosts)) == spread


def test_an_anti_affinity_group_wider_than_the_hosts_is_refused_whole(store, engine):
    current = fleet(free=3)
    scheduler, registry = service(current, store)
    assert scheduler.schedule(cpu_member(list(current.hosts), 0, "anti-affinity"),
                              LIVE).result == ()
    assert stored(engine) == (0, 0)
    assert counted(registry, "refused_whole") == 1


def test_an_expired_promise_with_unclaimed_slots_is_counted_by_the_next_group(store):
    current = fleet(free=8)
    hosts = list(current.hosts)
    scheduler, registry = service(current, store, ttl=60)
    scheduler.schedule(member(hosts, 0, request_id="req-old"), LIVE)
    later = datetime.now(UTC) + timedelta(seconds=120)
    scheduler.schedule(member(hosts, 0, request_id="req-new"),
                       RunOptions(pipeline="kvm-gpu-topology-aware", now=later))
    assert counted(registry, "expired") == 1
    assert [g.key for g in group_store(store).active(later)] == ["request:req-new"]


def test_concurrent_later_members_each_take_a_slot_of_their_own(store):
    current = fleet(free=8)
    hosts = list(current.hosts)
    scheduler, _ = service(current, store)
    first = scheduler.schedule(member(hosts, 0, members=8), LIVE).result[0]
    barrier = threading.Barrier(7)
    answers, errors = {}, []

    def one(i):
        worker, _ = service(current, store)
        barrier.wait()
        try:
            answers[i] = worker.schedule(member(hosts, i, members=8), LIVE).result[0]
        except Exception as exc:  # noqa: BLE001 - the assert below names it
            errors.append(exc)

    workers = [threading.Thread(target=one, args=(i,)) for i in range(1, 8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert errors == []
    assert sorted([first, *answers.values()]) == sorted(hosts)
    slots = group_store(store).slots(
        group_store(store).find("request:req-gang", datetime.now(UTC)), datetime.now(UTC))
    assert sorted(s.instance_uuid for s in slots) == [f"req-gang-i{i}" for i in range(8)]


def clique_fleet(per_clique=4, cliques=2, busy=(0, 0)):
    """Boards labelled with their NVLink clique (``c0``...), as Kubernetes nodes are.

    ``busy``: per clique, how many of its boards (the first) have every GPU in use.
    """
    boards = []
    for c in range(cliques):
        for i in range(per_clique):
            made = (busy_board if i < busy[c] else gpu_host)(f"c{c}n{i}")
            boards.append(dataclasses.replace(made, labels=MappingProxyType(
                {CLIQUE_LABEL: f"cluster-1.{c}"})))
    return view(*boards, service="nova")


@pytest.mark.parametrize("members", [4, 6])
def test_a_clique_bound_group_never_spans_two_cliques(store, engine, members):
    current = clique_fleet(per_clique=4, cliques=2)  # eight free boards, four per clique
    scheduler, _ = service(current, store)
    decision = scheduler.schedule(member(list(current.hosts), 0, members=members,
                                         hints={"nvlink_clique": ["true"]}), LIVE)
    promised = group_store(store).find("request:req-gang", datetime.now(UTC))
    if members == 6:  # eight boards free, but no clique holds six
        assert decision.result == () and promised is None and stored(engine) == (0, 0)
        assert "in one NVLink clique" in decision.steps[-1].detail
    else:
        assert len({clique_of(current, h) for h in promised.hosts}) == 1
        assert len(set(promised.hosts)) == 4


def test_a_clique_bound_group_takes_the_clique_that_holds_it(store):
    current = clique_fleet(per_clique=4, cliques=2, busy=(2, 1))  # two free, then three
    scheduler, _ = service(current, store)
    scheduler.schedule(member(list(current.hosts), 0, members=3,
                              hints={"nvlink_clique": ["true"]}), LIVE)
    promised = group_store(store).find("request:req-gang", datetime.now(UTC))
    assert sorted(promised.hosts) == ["c1n1", "c1n2", "c1n3"]
    assert gang_of(member(["g00"], 0, hints={"nvlink_clique": ["true"]})).one_clique
    assert not gang_of(member(["g00"], 0)).one_clique


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
def test_the_embedded_and_in_memory_stores_keep_group_promises_too(kind, tmp_path):
    from cortex.db.engine import make_engine
    from cortex.db.migrate import upgrade
    from cortex.store.memory import MemoryReservations

    engine = None
    if kind == "sqlite":
        engine = make_engine(f"sqlite:///{tmp_path / 'r.sqlite'}")
        upgrade(engine)
        store = ReservationStore(engine)
    else:
        store = MemoryReservations()
    current = fleet(free=4, busy=1)
    hosts = list(current.hosts)
    scheduler, _ = service(current, store)
    assert scheduler.schedule(member(hosts, 0, members=5), LIVE).result == ()
    assert store.active(datetime.now(UTC)) == []
    answers = [scheduler.schedule(member(hosts, i), LIVE).result[0] for i in range(4)]
    assert sorted(answers) == ["g00", "g01", "g02", "g03"]
    assert sorted(r.instance_uuid for r in store.active(datetime.now(UTC))) == [
        f"req-gang-i{i}" for i in range(4)]
    if engine is not None:
        engine.dispose()


class Broken:
    """Group promises whose database is down."""

    def find(self, key, now):
        raise ConnectionError("database down")


def test_a_group_store_failure_answers_unpromised_or_fails_by_the_policy():
    from cortex.scheduler.service import SchedulingFailed
    from cortex.store.memory import MemoryReservations

    class Down(MemoryReservations):
        def groups(self):
            return Broken()

    current = fleet(free=4)
    hosts = list(current.hosts)
    scheduler, _ = service(current, Down())
    decision = scheduler.schedule(member(hosts, 0), LIVE)
    assert decision.result and decision.steps[-1].status == "error"
    failing = SchedulerService(PIPELINES, ViewCache(current), SchedulerSettings(
        request_time_budget=0, promise_failure_policy="fail"), reservations=Down())
    with pytest.raises(SchedulingFailed) as failed:
        failing.schedule(member(hosts, 0), LIVE)
    assert failed.value.status == 503
