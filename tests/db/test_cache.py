"""The per-worker knowledge cache: version checks, rebuilds, the last good view on errors."""

import threading

import pytest
from sqlalchemy.exc import OperationalError

from cortex.knowledge import cache as cache_module
from cortex.knowledge.cache import KnowledgeCache, KnowledgeUnavailable
from tests.waiting import DEADLINE, wait_until


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.fixture
def counted(monkeypatch, db):
    """Count version reads and full loads of the test's caches (``engine=None``).

    Both run on the test's connection. Other tests' apps may still have a checker
    thread running: their calls (a real engine) pass through uncounted.
    """
    calls = {"version": 0, "load": 0, "version_value": None, "fail": False}
    real_read, real_load = cache_module.read_version, cache_module.load_view

    def read_version(engine):
        if engine is not None:  # another test's app, its checker still running
            return real_read(engine)
        if calls["fail"]:
            raise OperationalError("SELECT", {}, Exception("down"))
        calls["version"] += 1
        return calls["version_value"] if calls["version_value"] is not None else real_read(db)

    def load_view(engine, previous=None, network_keys=None, kubernetes_nodes=False,
                  request_sizes=False):
        if engine is not None:
            return real_load(engine, previous=previous, network_keys=network_keys,
                             kubernetes_nodes=kubernetes_nodes, request_sizes=request_sizes)
        if calls["fail"]:
            raise OperationalError("SELECT", {}, Exception("down"))
        calls["load"] += 1
        return real_load(db, previous=previous, network_keys=network_keys,
                         kubernetes_nodes=kubernetes_nodes, request_sizes=request_sizes)

    monkeypatch.setattr(cache_module, "read_version", read_version)
    monkeypatch.setattr(cache_module, "load_view", load_view)
    return calls


def test_view_is_reused_until_the_version_moves(counted):
    clock = Clock()
    cache = KnowledgeCache(engine=None, interval=1.0, clock=clock)
    first = cache.view()
    assert counted["load"] == 1
    clock.now = 0.5
    assert cache.view() is first and counted["version"] == 0  # within the interval: no query
    clock.now = 1.5
    assert cache.view() is first and counted["version"] == 1 and counted["load"] == 1
    counted["version_value"] = first.version + 1
    clock.now = 3.0
    cache.view()
    assert counted["load"] == 2


def test_last_good_view_survives_a_database_failure(counted):
    clock = Clock()
    cache = KnowledgeCache(engine=None, interval=1.0, clock=clock)
    first = cache.view()
    counted["fail"] = True
    clock.now = 5.0
    assert cache.view() is first
    assert "database unreachable" in cache.last_error
    counted["fail"] = False
    clock.now = 10.0
    cache.view()
    assert cache.last_error is None


def test_no_view_at_all_raises(counted):
    counted["fail"] = True
    cache = KnowledgeCache(engine=None, interval=1.0, clock=Clock())
    with pytest.raises(KnowledgeUnavailable, match="database unreachable"):
        cache.view()


def test_too_old_view_is_refused_and_checks_back_off(counted):
    clock = Clock()
    cache = KnowledgeCache(engine=None, interval=0.25, max_age=10.0, clock=clock,
                           jitter=lambda: 0.0)
    cache.view()
    counted["fail"] = True
    clock.now = 1.0
    cache.view()                      # failure 1: next check in 0.5 s
    counted["fail"] = False
    clock.now = 1.4
    cache.view()
    assert counted["version"] == 0    # backing off: no query at all
    counted["fail"] = True
    clock.now = 1.5
    cache.view()                      # failure 2: next check in 1 s (the cap)
    clock.now = 11.0
    with pytest.raises(KnowledgeUnavailable, match="knowledge is 11 s old"):
        cache.view()
    counted["fail"] = False
    clock.now = 20.0
    assert cache.view() is not None and cache.problem() is None


def test_back_off_is_capped_so_recovery_takes_at_most_max_retry(counted):
    clock = Clock()
    cache = KnowledgeCache(engine=None, interval=1.0, clock=clock, max_retry=1.0,
                           jitter=lambda: 0.0)
    cache.view()
    counted["fail"] = True
    for _ in range(20):               # a long outage: twenty failed checks
        clock.now += 30
        cache.view()
    counted["fail"] = False           # the database is back
    clock.now += 1.0                  # before: the next check came up to 30 s later
    cache.view()
    assert counted["version"] == 1 and cache.last_error is None


def test_jitter_spreads_the_retries_of_the_workers(counted):
    pauses = []
    for jitter in (0.0, 0.5, 0.999):
        clock = Clock()
        cache = KnowledgeCache(engine=None, interval=1.0, clock=clock, max_retry=1.0,
                               jitter=lambda j=jitter: j)
        cache.view()
        counted["fail"] = True
        clock.now = 5.0
        cache.view()
        counted["fail"] = False
        pauses.append(cache._next_check - clock.now)
    assert pauses == sorted(pauses, reverse=True) and pauses[0] == 1.0 and pauses[-1] > 0.5


class WatchedLock:
    """A lock that tells when a thread asks for it while another holds it."""

    def __init__(self):
        self._lock = threading.Lock()
        self.contended = threading.Event()

    def acquire(self, blocking=True, timeout=-1):
        if self._lock.locked():
            self.contended.set()
        return self._lock.acquire(blocking, timeout)

    def release(self):
        self._lock.release()


def test_cold_cache_makes_concurrent_callers_wait_for_the_first_load(counted, monkeypatch):
    cache = KnowledgeCache(engine=None, interval=1.0, clock=Clock())
    cache._lock = lock = WatchedLock()
    loading, release = threading.Event(), threading.Event()
    real_load = cache_module.load_view

    def slow_load(bind, **kwargs):
        loading.set()
        release.wait(DEADLINE)  # until the second caller came while this load runs
        return real_load(bind, **kwargs)

    monkeypatch.setattr(cache_module, "load_view", slow_load)
    answers = {}

    def call(name):
        try:
            answers[name] = cache.view()
        except KnowledgeUnavailable as exc:
            answers[name] = exc

    first = threading.Thread(target=call, args=("first",))
    first.start()
    try:
        assert loading.wait(DEADLINE), "the first caller never started loading"
        second = threading.Thread(target=call, args=("second",))
        second.start()
        assert lock.contended.wait(DEADLINE), "the second caller never asked for the lock"
    finally:
        release.set()
    first.join(DEADLINE)
    second.join(DEADLINE)
    assert counted["load"] == 1
    # waited for the load: the view, no KnowledgeUnavailable
    assert answers["second"] is answers["first"] is cache.current is not None


def test_a_loaded_view_is_frozen_out_of_full_collections(counted, monkeypatch):
    import gc

    gc.unfreeze()
    monkeypatch.setattr(cache_module, "SETTLE_MIN_HOSTS", 1)  # the test fleet is small
    try:
        cache = KnowledgeCache(engine=None, interval=1.0, clock=Clock())
        view = cache.view()
        frozen = gc.get_freeze_count()
        assert frozen >= len(view.hosts) > 0
        assert all(o is not view for o in gc.get_objects(generation=2))  # frozen: in none
    finally:
        gc.unfreeze()


def test_a_small_view_is_left_to_the_collector_and_releases_a_larger_one_frozen_before():
    import gc

    gc.unfreeze()
    try:
        cache_module.settle_garbage_collector(cache_module.SETTLE_MIN_HOSTS - 1)
        assert gc.get_freeze_count() == 0  # nothing frozen: no full collection either
        cache_module.settle_garbage_collector(cache_module.SETTLE_MIN_HOSTS)
        assert gc.get_freeze_count() > 0  # a large view is frozen
        cache_module.settle_garbage_collector(cache_module.SETTLE_MIN_HOSTS - 1)
        assert gc.get_freeze_count() == 0  # the larger one before it can be freed
    finally:
        gc.unfreeze()


def test_background_reload_answers_from_the_current_view_meanwhile(counted):
    release = threading.Event()
    real_load = cache_module.load_view

    clock = Clock()
    cache = KnowledgeCache(engine=None, interval=1.0, clock=clock, background=True)
    first = cache.view()                                   # cold: loaded inline
    assert counted["load"] == 1

    def slow_load(*args, **kwargs):
        release.wait(DEADLINE)
        return real_load(*args, **kwargs)

    cache_module.load_view = slow_load
    try:
        counted["version_value"] = first.version + 1
        clock.now = 2.0
        assert cache.view() is first                       # the reload waits; we do not
        assert cache.view() is first
        release.set()
        cache.wait_for_refresh(DEADLINE)
    finally:
        cache_module.load_view = real_load
    assert counted["load"] == 2 and cache.view() is not first


@pytest.fixture
def checked(counted):
    """``(cache, clock)``: a cache with a background checker, max_age 10 s; closed after."""
    clock = Clock()
    cache = KnowledgeCache(engine=None, interval=1.0, max_age=10.0, clock=clock,
                           background=True)
    yield cache, clock
    cache.close()


def test_background_checker_keeps_the_age_current_without_requests(counted, checked):
    cache, clock = checked
    cache.view()                                           # starts the checker
    with cache._lock:                                      # no check in flight meanwhile
        checks = counted["version"]
        clock.now = 3600.0                                 # an hour without a request
    wait_until(lambda: counted["version"] > checks and cache.age() < 10,
               what="a check of the checker's own, an hour on")
    assert cache.problem() is None


def test_the_checker_runs_from_the_start_not_from_the_first_request(counted, checked):
    cache, clock = checked
    cache.refresh()                                        # the app's own first load
    cache.start()                                          # the worker starts
    with cache._lock:                                      # no check in flight meanwhile
        checks = counted["version"]
        clock.now = 3600.0                                 # idle: not one request
    wait_until(lambda: counted["version"] > checks and cache.age() < 10,
               what="a check of the checker's own, an hour on")
    assert cache.problem() is None


def test_a_view_too_old_waits_for_its_check_instead_of_answering_unavailable(counted,
                                                                            checked):
    cache, clock = checked
    first = cache.view()
    cache.close()                                          # say the process was suspended
    clock.now = 3600.0
    assert cache.view() is first                           # checked, not refused
    assert cache.age() == 0.0
    counted["fail"] = True                                 # a database found down...
    wait_until(lambda: cache._failures, what="the checker finding the database down")
    clock.now = 7200.0
    with pytest.raises(KnowledgeUnavailable):              # ...is not waited for
        cache.view()
