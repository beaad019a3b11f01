"""In-flight reservations in the database: promised once under concurrency, counted until seen."""

import dataclasses
import json
import threading
from datetime import UTC, datetime, timedelta
from types import MappingProxyType

import pytest
from sqlalchemy import delete, text

from cortex.db import models
from cortex.db.engine import make_engine
from cortex.db.migrate import upgrade
from cortex.knowledge.reservations import Reservation, with_reservations
from cortex.store.reservations import LOCK_NAMESPACE, ReservationStore
from tests.fakes import host, instance, inventory, promise, view
from tests.waiting import DEADLINE, wait_until

#: Every time here reaches the code under test as an argument, and nothing compares it
#: with the real clock: a fixed instant, the same whenever (and however late) a test runs.
NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def reservation(rid, host_name="h1", instance_uuid=None, vcpus=4, ttl=300, group=None):
    return Reservation(rid, host_name, instance_uuid, group, MappingProxyType({"VCPU": vcpus}),
                       ("0000:17:00.0",), NOW, NOW + timedelta(seconds=ttl))


@pytest.fixture
def store(engine):
    """The session database's store, the table emptied before and after.

    Before too: an app of another test, built from a configuration file (the default
    TTL), may have promised room in the session database.
    """
    with engine.begin() as connection:
        connection.execute(delete(models.InflightReservation))
    yield ReservationStore(engine)
    with engine.begin() as connection:
        connection.execute(delete(models.InflightReservation))


def race(store, threads, room):
    """``threads`` concurrent promises on one host that has room for ``room``; those made."""
    barrier = threading.Barrier(threads)
    made = []

    def one(i):
        barrier.wait()
        got = promise(store, "h1", NOW, lambda current: reservation(f"r{i:02d}", instance_uuid=
                                                                    f"i{i:02d}")
                            if len(current) < room else None)
        if got is not None:
            made.append(got)

    workers = [threading.Thread(target=one, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    return made


def test_fifty_concurrent_promises_never_exceed_the_room(store, engine):
    made = race(store, 50, 3)
    assert len(made) == 3
    assert len(store.active(NOW)) == 3


def test_unchanged_promises_wait_for_the_hosts_lock_and_then_see_its_write(store, engine):
    """Callers that counted no reservation on h1 queue on its lock while another call
    holds it; that call writes one, and each of them then finds h1 changed."""
    waiting = text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                   "AND classid = :ns AND database = (SELECT oid FROM pg_database "
                   "WHERE datname = current_database())").bindparams(ns=LOCK_NAMESPACE)
    results, workers = [], []

    def one(i):
        made = reservation(f"r{i}", instance_uuid=f"i{i}")
        results.append(store.reserve_if_unchanged(made, NOW, frozenset(), made.instance_uuid))

    with store.lock_host("h1", NOW) as held:
        workers = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        for worker in workers:
            worker.start()

        def queued():
            with engine.connect() as connection:
                return connection.execute(waiting).scalar() == 8 or len(results) == 8

        wait_until(queued, what="eight promises waiting for h1's lock")
        held.reserve(reservation("first", instance_uuid="i-first"))
    for worker in workers:
        worker.join(30)
    assert results == [False] * 8
    assert [r.id for r in store.active(NOW)] == ["first"]


@pytest.fixture(params=["postgresql", "sqlite", "memory"])
def any_store(request, store, tmp_path):
    """Each kind of store, empty: their ``reserve_if_unchanged`` keeps one rule."""
    from cortex.store.memory import MemoryReservations

    if request.param == "postgresql":
        yield store
    elif request.param == "memory":
        yield MemoryReservations()
    else:
        engine = make_engine(f"sqlite:///{tmp_path / 'r.sqlite'}")
        upgrade(engine)
        yield ReservationStore(engine)
        engine.dispose()


def test_a_reservation_is_written_only_on_the_host_its_caller_counted(any_store):
    """Unexpired reservations of the host count, but not the caller's own instance's
    (replaced), another host's or an expired one; a reservation without an instance
    counts (none is the caller's)."""
    for made in (reservation("a", "h1", "i1"), reservation("own", "h1", "i9"),
                 reservation("gone", "h1", "i2", ttl=-1), reservation("far", "h2", "i3"),
                 reservation("anon", "h3", None)):
        promise(any_store, made.host, NOW, lambda _, made=made: made)

    def ids():
        return sorted(r.id for r in any_store.active(NOW))

    before = ids()
    mine = reservation("new", "h1", "i9")
    assert not any_store.reserve_if_unchanged(mine, NOW, frozenset(), "i9")
    assert not any_store.reserve_if_unchanged(mine, NOW, frozenset({"a", "own"}), "i9")
    assert not any_store.reserve_if_unchanged(mine, NOW, frozenset({"a", "b"}), "i9")
    assert ids() == before  # refused: nothing written
    assert any_store.reserve_if_unchanged(mine, NOW, frozenset({"a"}), "i9")
    assert ids() == ["a", "anon", "far", "new"]  # i9's earlier one replaced
    assert not any_store.reserve_if_unchanged(reservation("x", "h3", None), NOW,
                                              frozenset(), None)
    assert any_store.reserve_if_unchanged(reservation("y", "h3", None), NOW,
                                          frozenset({"anon"}), None)
    assert any_store.reserve_if_unchanged(reservation("z", "h4", "i4"), NOW, frozenset(), "i4")
    assert ids() == ["a", "anon", "far", "new", "y", "z"]


def test_sqlite_serialises_promises_in_one_process(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'r.sqlite'}")
    upgrade(engine)
    sqlite_store = ReservationStore(engine)
    assert len(race(sqlite_store, 20, 2)) == 2
    assert {r.host for r in sqlite_store.active(NOW)} == {"h1"}
    engine.dispose()


def test_a_new_answer_for_the_same_instance_replaces_the_old(store):
    promise(store, "h1", NOW, lambda _: reservation("a", "h1", "i1"))
    promise(store, "h2", NOW, lambda _: reservation("b", "h2", "i1"))
    assert [(r.id, r.host) for r in store.active(NOW)] == [("b", "h2")]


def test_refused_promises_write_nothing_and_expired_ones_are_pruned(store):
    assert promise(store, "h1", NOW, lambda _: None) is None
    promise(store, "h1", NOW, lambda _: reservation("old", ttl=-1))
    promise(store, "h1", NOW, lambda _: reservation("new"))
    assert [r.id for r in store.active(NOW)] == ["new"]
    assert store.prune(NOW) == 1
    stored = store.active(NOW)[0]
    assert stored.gpus == ("0000:17:00.0",) and stored.resources == {"VCPU": 4}
    assert stored.expires_at.tzinfo is not None


def test_reservations_count_until_the_instance_shows_up():
    base = view(host("h1", inventories={"VCPU": inventory(16, used=4)}))
    held = [reservation("a", instance_uuid="i1"), reservation("b", instance_uuid="i2"),
            reservation("c", instance_uuid="i3", ttl=-5)]
    overlaid = with_reservations(base, held, NOW)
    assert overlaid.hosts["h1"].nodes["h1.cloud.example"].inventories["VCPU"].used == 12
    assert {r.id for r in overlaid.reservations} == {"a", "b"}
    synced = dataclasses.replace(base, hosts=MappingProxyType(
        {"h1": dataclasses.replace(base.hosts["h1"], instances=(instance("i1"),))}))
    seen = with_reservations(synced, held, NOW)
    assert seen.hosts["h1"].nodes["h1.cloud.example"].inventories["VCPU"].used == 8
    assert {r.id for r in seen.reservations} == {"a", "b"}  # still tells the group
    again = with_reservations(base, held, NOW, instance_uuid="i2")
    assert again.hosts["h1"].nodes["h1.cloud.example"].inventories["VCPU"].used == 8


def test_capacity_filter_sees_an_overlay_after_the_synced_view_was_judged():
    from cortex.plugins.filters.has_enough_capacity import HasEnoughCapacityFilter
    from tests.fakes import nova

    room = {"VCPU": inventory(16, used=4), "MEMORY_MB": inventory(65536),
            "DISK_GB": inventory(1000)}
    base = view(host("h1", inventories=room), host("h2", inventories=room))
    request = nova(hosts=["h1", "h2"], flavor={"vcpus": 8, "memory_mb": 1024, "root_gb": 10})
    capacity = HasEnoughCapacityFilter()

    def judged(v):
        pairs = [(c, v.hosts[c.host]) for c in request.candidates]
        return capacity.check_all(pairs, request, v)

    assert judged(base) == {}  # builds the synced view's free-capacity table
    overlaid = with_reservations(base, [reservation("a", "h1", vcpus=8)], NOW)
    assert overlaid.root is base
    assert set(judged(overlaid)) == {"h1"}
    assert judged(base) == {}


def test_the_store_recovers_by_itself_when_the_server_dropped_its_connections(store, engine):
    promise(store, "h1", NOW, lambda _: reservation("kept"))
    if engine.dialect.name != "postgresql":  # one process, one file: nothing to drop
        assert [r.id for r in store.active(NOW)] == ["kept"]
        return
    with engine.connect() as admin:  # what a server restart does to the store's pool
        admin.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                           "WHERE datname = current_database() AND pid <> pg_backend_pid()"))
    outcomes = []
    for _ in range(3):
        try:
            outcomes.append([r.id for r in store.active(NOW)])
        except Exception as exc:  # noqa: BLE001 - the one failure the store allows
            outcomes.append(type(exc).__name__)
    assert outcomes[-2:] == [["kept"], ["kept"]], outcomes
    assert isinstance(outcomes[0], str) or outcomes[0] == ["kept"]


def _general_purpose(memory_mb=262144):
    """(pipeline, request for instance i9 on h1, synced view of h1 with ``memory_mb``)."""
    from cortex import conf
    from cortex.pipeline.config import load_pipelines
    from tests.fakes import nova

    base = view(host("h1", inventories={"VCPU": inventory(64), "MEMORY_MB": inventory(memory_mb),
                                        "DISK_GB": inventory(2000)}))
    pipeline = load_pipelines(conf.shipped_file("pipelines.yaml")).pipelines[
        "kvm-general-purpose-load-balancing"]
    return pipeline, nova(hosts=["h1"], spec={"instance_uuid": "i9"}), base


def _watch_refusals(monkeypatch):
    """The views the promise's re-check ran the filters on (a list that fills)."""
    from cortex.scheduler import promise as promising

    seen = []
    real = promising.refusal
    monkeypatch.setattr(promising, "refusal", lambda p, r, v, h: seen.append(v) or real(p, r, v, h))
    return seen


def _store_with(*reservations):
    from cortex.store.memory import MemoryReservations

    store = MemoryReservations()
    for made in reservations:
        promise(store, made.host, NOW, lambda _, made=made: made)
    return store


def test_the_promise_recheck_shares_the_synced_views_facts(monkeypatch):
    """The re-check under the lock overlays the request's view: facts the plugins keep
    per knowledge version (``root.derived``) are read, not rebuilt for every promise.
    It runs here because another call promised h1 after the request's view was made."""
    from cortex.pipeline.engine import run_pipeline
    from cortex.scheduler import promise as promising

    pipeline, request, base = _general_purpose()
    result = run_pipeline(pipeline, request, base)
    seen = _watch_refusals(monkeypatch)
    store = _store_with(reservation("meanwhile", "h1", "i8"))
    promised = promising.promise_first(pipeline, request, base, base, result, store, 300.0, NOW)
    assert promised.hosts == ["h1"] and len(seen) == 1
    assert seen[0].root is base and seen[0].hosts["h1"] is not base.hosts["h1"]


def test_a_host_with_the_reservations_its_view_counted_is_not_filtered_again(monkeypatch):
    from cortex.pipeline.engine import run_pipeline
    from cortex.scheduler import promise as promising

    pipeline, request, base = _general_purpose()
    counted = [reservation("a", "h1", "i1"), reservation("b", "h1", "i2", ttl=1)]
    # b expired by the time of the promise: neither side counts it
    overlaid = with_reservations(base, counted[:1], NOW)
    result = run_pipeline(pipeline, request, overlaid)
    seen = _watch_refusals(monkeypatch)
    later = NOW + timedelta(seconds=2)
    elsewhere = reservation("c", "h2", "i3")  # another host's: not h1's state
    promised = promising.promise_first(pipeline, request, base, overlaid, result,
                                       _store_with(*counted, elsewhere), 300.0, later)
    assert seen == [] and promised.hosts == ["h1"]
    assert promised.steps[-1].detail.startswith("promised h1")
    # nothing is skipped when the store holds one the view did not count
    promising.promise_first(pipeline, request, base, base, result, _store_with(*counted),
                            300.0, later)
    assert len(seen) == 1


@pytest.fixture
def watched_store(empty_database_url):
    """A store on a database of its own whose reservation rows tell how they were written.

    A trigger sets each written row's ``group_id`` to the writing transaction's
    ``synchronous_commit`` and the number of advisory locks its session holds, counts
    every row it sees in the sequence ``seen`` (which no rollback takes back), and
    refuses a row for host ``bad``.
    """
    if not empty_database_url.startswith("postgresql"):  # CORTEX_TEST_DATABASE_URL=sqlite
        pytest.fail("this test needs PostgreSQL: the one-round-trip promise is PostgreSQL's")
    engine = make_engine(empty_database_url)
    upgrade(engine)
    with engine.begin() as connection:
        connection.execute(text("CREATE SEQUENCE seen"))
        connection.execute(text("""
            CREATE FUNCTION tell() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                PERFORM nextval('seen');
                IF NEW.host = 'bad' THEN RAISE EXCEPTION 'refused by the test'; END IF;
                NEW.group_id := current_setting('synchronous_commit') || '/' ||
                    (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
                     AND pid = pg_backend_pid() AND granted);
                RETURN NEW;
            END $$"""))
        connection.execute(text("CREATE TRIGGER tell BEFORE INSERT OR UPDATE ON "
                                "inflight_reservations FOR EACH ROW EXECUTE FUNCTION tell()"))
    store = ReservationStore(engine)
    yield store, engine
    store._engine.dispose()  # the process's pool for this URL: its database is dropped next
    engine.dispose()


def test_the_one_round_trip_promise_is_one_transaction_under_the_hosts_lock(watched_store):
    """``reserve_if_unchanged`` on PostgreSQL writes under the host's advisory lock, without
    waiting for the WAL flush; a failing write leaves nothing: no row, no lock held, the
    connection usable."""
    store, engine = watched_store
    assert store.reserve_if_unchanged(reservation("a", "h1", "i1"), NOW, frozenset(), "i1")
    with pytest.raises(Exception, match="refused by the test"):
        store.reserve_if_unchanged(reservation("b", "bad", "i2"), NOW, frozenset(), "i2")
    assert store.reserve_if_unchanged(reservation("c", "h2", "i3"), NOW, frozenset(), "i3")
    assert not store.reserve_if_unchanged(reservation("d", "h1", "i4"), NOW, frozenset(), "i4")
    odd = "o'brien\\\u00fc;--"  # written as it is, whatever its quotes
    assert store.reserve_if_unchanged(reservation("e", odd, "i'5"), NOW, frozenset(), "i'5")
    assert store.reserve_if_unchanged(reservation("f", "h1", "i6"), NOW, frozenset({"a"}), "i6")
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT id, host, instance_uuid, group_id "
                                       "FROM inflight_reservations ORDER BY id")).all()
        held = connection.execute(text("SELECT count(*) FROM pg_locks WHERE locktype = "
                                       "'advisory'")).scalar()
    assert [tuple(r) for r in rows] == [("a", "h1", "i1", "off/1"), ("c", "h2", "i3", "off/1"),
                                        ("e", odd, "i'5", "off/1"), ("f", "h1", "i6", "off/1")]
    assert held == 0


def test_a_rehearsed_promise_runs_its_write_and_leaves_nothing(watched_store):
    """The warm-up's rehearsal runs the promise's upsert (so the session has planned it)
    and rolls it back: no row, no lock held, nothing announced, and the next promise on
    the same connection is written as any other."""
    store, engine = watched_store
    with engine.connect() as listener:
        raw = listener.connection.driver_connection
        raw.autocommit = True
        raw.execute("LISTEN cortex_reservations")
        assert store.rehearse(reservation("r", "warm", "i1"), NOW)
        assert store.reserve_if_unchanged(reservation("a", "h1", "i2"), NOW, frozenset(), "i2")
        assert not store.rehearse(reservation("s", "h1", "i3"), NOW), "h1 holds a's"
        heard = [json.loads(n.payload)["row"]["id"]
                 for n in raw.notifies(timeout=DEADLINE, stop_after=1)]
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT id, group_id FROM inflight_reservations"
                                           )).all()
            held = connection.execute(text("SELECT count(*) FROM pg_locks WHERE locktype = "
                                           "'advisory'")).scalar()
            seen = connection.execute(text("SELECT last_value FROM seen")).scalar()
    assert [tuple(r) for r in rows] == [("a", "off/1")] and held == 0
    assert seen == 2, "the rehearsal's row reached the table's trigger, a's too; s's did not"
    assert heard == ["a"], "the table's trigger announced a's row alone"


def test_an_unchanged_host_is_promised_without_reading_under_its_lock(store, monkeypatch):
    """On PostgreSQL the promise of a host with the reservations the view counted is one
    round trip (``reserve_if_unchanged``), not ``lock_host``'s read and then write; a
    reservation made meanwhile sends it back to the re-check under the lock."""
    from cortex.pipeline.engine import run_pipeline
    from cortex.scheduler import promise as promising

    pipeline, request, base = _general_purpose()
    counted = reservation("a", "h1", "i1")
    promise(store, "h1", NOW, lambda _: counted)
    overlaid = with_reservations(base, [counted], NOW)
    result = run_pipeline(pipeline, request, overlaid)
    seen = _watch_refusals(monkeypatch)
    locked = []
    real_lock = store.lock_host
    monkeypatch.setattr(store, "lock_host", lambda h, n: locked.append(h) or real_lock(h, n))
    promised = promising.promise_first(pipeline, request, base, overlaid, result, store,
                                       300.0, NOW)
    assert promised.hosts == ["h1"] and locked == [] and seen == []
    made = next(r for r in store.active(NOW) if r.instance_uuid == "i9")
    assert promised.steps[-1].detail.startswith(f"promised h1 until {made.expires_at:%Y}")
    assert made.id in promised.steps[-1].detail and made.resources["VCPU"] > 0
    promise(store, "h1", NOW, lambda _: reservation("meanwhile", "h1", "i8"))
    locked.clear()
    again = promising.promise_first(pipeline, request, base, overlaid, result, store,
                                    300.0, NOW)
    assert again.hosts == ["h1"] and locked == ["h1"] and len(seen) == 1


def test_a_host_filled_since_the_view_was_made_is_refused_under_the_lock(monkeypatch):
    from cortex.pipeline.engine import run_pipeline
    from cortex.scheduler import promise as promising

    pipeline, request, base = _general_purpose(memory_mb=65536)
    result = run_pipeline(pipeline, request, base)
    assert result.hosts == ["h1"]
    filled = Reservation("full", "h1", "i7", None, MappingProxyType({"MEMORY_MB": 65536}), (),
                         NOW, NOW + timedelta(seconds=300))
    promised = promising.promise_first(pipeline, request, base, base, result,
                                       _store_with(filled), 300.0, NOW)
    assert promised.hosts == []
    assert "MEMORY_MB" in promised.steps[-1].removed["h1"]


def test_a_call_with_a_failed_filter_is_always_filtered_again(monkeypatch):
    """A filter that raised was skipped by its policy in the pipeline but refuses in the
    re-check: a host is then never promised on the pipeline's word."""
    from cortex.decision import StepResult
    from cortex.pipeline.engine import run_pipeline
    from cortex.scheduler import promise as promising

    pipeline, request, base = _general_purpose()
    result = run_pipeline(pipeline, request, base)
    broken = dataclasses.replace(result, steps=[*result.steps, StepResult(
        "filter_broken", "filter", "error", reason="RuntimeError('boom')")])
    seen = _watch_refusals(monkeypatch)
    promising.promise_first(pipeline, request, base, base, broken, _store_with(), 300.0, NOW)
    assert len(seen) == 1


def test_a_hosts_reserved_state_is_kept_while_its_reservations_stay_the_same():
    base = view(host("h1", inventories={"VCPU": inventory(64)}),
                host("h2", inventories={"VCPU": inventory(64)}))
    held = [reservation("a", "h1", "i1"), reservation("b", "h2", "i2")]
    first = with_reservations(base, held, NOW)
    again = with_reservations(base, [*held, reservation("c", "h2", "i3")], NOW)
    assert again.hosts["h1"] is first.hosts["h1"]  # h1's reservations did not change
    assert again.hosts["h2"] is not first.hosts["h2"]
    assert again.hosts["h2"].nodes["h2.cloud.example"].inventories["VCPU"].used == 8
    moved = dataclasses.replace(base, hosts=MappingProxyType(dict(base.hosts)))  # a new version
    assert with_reservations(moved, held, NOW).hosts["h1"] is not first.hosts["h1"]
