"""The engine keeps the answers of steps with a memo key (cortex.pipeline.memo)."""

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from cortex.knowledge.reservations import Reservation, with_reservations
from cortex.pipeline.config import build_pipelines
from cortex.pipeline.engine import run_pipeline
from cortex.plugins.base import Filter, Weigher
from cortex.plugins.registry import register
from tests.fakes import host, inventory, nova, view

NOW = datetime(2026, 1, 1, tzinfo=UTC)
HOSTS = ["a", "b", "c", "d"]
MANY = 64  # hosts enough that kept answers are patched in bulk


@dataclass(frozen=True)
class CountingOptions:
    """``asked``: every host name the plugin was asked about, in order (shared list)."""

    asked: list = field(default_factory=list, compare=False)


@register
class CountingFilter(Filter):
    """Removes hosts whose name is in the request's project; records what it is asked."""

    name = "test_counting_filter"
    Options = CountingOptions

    def memo_key(self, request):
        return request.project_id

    def check(self, host, request, candidate):
        self.options.asked.append(candidate.host)
        return "named" if candidate.host in (request.project_id or "") else None


@register
class CountingWeigher(Weigher):
    """Weighs a host by its used VCPU; records what it is asked."""

    name = "test_counting_weigher"
    Options = CountingOptions

    def memo_key(self, request):
        return ()

    def weigh(self, host, request, candidate):
        self.options.asked.append(candidate.host)
        return float(host.all_nodes[0].inventories["VCPU"].used)


def pipeline():
    """A pipeline of the two counting steps; ``(pipeline, filter's asked, weigher's asked)``."""
    spec = {"service": "nova",
            "filters": [{"name": "test_counting_filter", "options": {}}],
            "weighers": [{"name": "test_counting_weigher", "options": {}}]}
    built = build_pipelines({"defaults": {"nova": "p"}, "pipelines": {"p": spec}}).pipelines["p"]
    return built, built.filters[0].plugin.options.asked, built.weighers[0].plugin.options.asked


def fleet():
    hosts = [host(h, inventories={"VCPU": inventory(64, used=i)}) for i, h in enumerate(HOSTS)]
    hosts.append(host("e", nodes={"e1": {"VCPU": inventory(64, used=9)},
                                  "e2": {"VCPU": inventory(64, used=9)}}))
    return view(*hosts)


def request(project="b", hosts=(*HOSTS, "e")):
    return nova(hosts=list(hosts), weights={h: 0.0 for h in hosts}, spec={"project_id": project})


def test_a_repeated_key_asks_nothing_again():
    p, asked, weighed = pipeline()
    synced = fleet()
    first = run_pipeline(p, request(), synced)
    assert sorted(asked) == ["a", "b", "c", "d", "e"] and "b" in first.steps[0].removed
    asked.clear()
    weighed.clear()
    again = run_pipeline(p, request(), synced)
    assert asked == ["e"]            # a host with several nodes is always asked
    assert weighed == ["e"]
    assert again.hosts == first.hosts and again.steps[0].removed == first.steps[0].removed
    assert again.steps[1].values == first.steps[1].values


def test_another_key_and_another_version_ask_again():
    p, asked, _ = pipeline()
    synced = fleet()
    run_pipeline(p, request(), synced)
    asked.clear()
    other = run_pipeline(p, request(project="cd"), synced)
    assert sorted(asked) == ["a", "b", "c", "d", "e"]
    assert set(other.steps[0].removed) == {"c", "d"}
    asked.clear()
    run_pipeline(p, request(), fleet())      # a new synced view keeps nothing of the old
    assert sorted(asked) == ["a", "b", "c", "d", "e"]


def test_only_new_candidates_are_asked():
    p, asked, _ = pipeline()
    synced = fleet()
    run_pipeline(p, request(hosts=("a", "b")), synced)
    asked.clear()
    result = run_pipeline(p, request(hosts=("d", "c", "b", "a")), synced)
    assert sorted(asked) == ["c", "d"]
    assert list(result.steps[0].removed) == ["b"]


def reserve(rid, host_name, vcpus):
    return Reservation(rid, host_name, f"i-{rid}", None, {"VCPU": vcpus}, (), NOW,
                       NOW + timedelta(minutes=5))


def test_an_overlay_state_is_judged_once_while_its_reservations_stay():
    p, asked, weighed = pipeline()
    synced = fleet()
    run_pipeline(p, request(), synced)
    overlaid = with_reservations(synced, [reserve("r1", "c", 30)], NOW)
    assert overlaid.overlaid == {"c"}
    asked.clear()
    weighed.clear()
    result = run_pipeline(p, request(), overlaid)
    assert sorted(asked) == ["c", "e"] and sorted(weighed) == ["c", "e"]
    assert result.steps[1].raw["c"] == 32.0      # the reserved state, not the synced one
    asked.clear()
    weighed.clear()
    again = run_pipeline(p, request(), with_reservations(synced, [reserve("r1", "c", 30)], NOW))
    assert asked == ["e"] and weighed == ["e"]   # the same reserved state: kept
    assert again.steps[1].raw["c"] == 32.0
    asked.clear()
    synced_again = run_pipeline(p, request(), synced)
    assert asked == ["e"]                        # the synced answer stands beside it
    assert synced_again.steps[1].raw["c"] == 2.0


def test_other_reservations_on_a_host_are_judged_again():
    p, asked, weighed = pipeline()
    synced = fleet()
    run_pipeline(p, request(), with_reservations(synced, [reserve("r1", "c", 30)], NOW))
    asked.clear()
    weighed.clear()
    two = [reserve("r1", "c", 30), reserve("r2", "c", 10)]
    result = run_pipeline(p, request(), with_reservations(synced, two, NOW))
    assert sorted(weighed) == ["c", "e"]
    assert result.steps[1].raw["c"] == 42.0


def test_a_filter_answer_on_an_overlay_state_is_kept_with_its_reason():
    p, asked, _ = pipeline()
    synced = fleet()
    reservations = [reserve("r1", "b", 1), reserve("r2", "d", 1)]
    first = run_pipeline(p, request(), with_reservations(synced, reservations, NOW))
    asked.clear()
    again = run_pipeline(p, request(), with_reservations(synced, reservations, NOW))
    assert asked == ["e"]
    assert again.steps[0].removed == first.steps[0].removed == {"b": "named"}
    assert again.hosts == first.hosts


def test_kept_overlay_answers_equal_answers_asked_afresh():
    import random

    rng = random.Random(7)
    kept, _, _ = pipeline()
    fresh, _, _ = pipeline()
    synced = fleet()
    pool = [reserve(f"r{i}", rng.choice([*HOSTS, "e"]), rng.randint(1, 20)) for i in range(12)]
    for _ in range(60):
        chosen = rng.sample(pool, rng.randint(0, 6))
        overlaid = with_reservations(synced, chosen, NOW)
        project = rng.choice(["a", "bc", "x"])
        names = rng.sample([*HOSTS, "e"], rng.randint(1, 5))
        got = run_pipeline(kept, request(project, names), overlaid)
        want = run_pipeline(fresh, request(project, names), overlaid, memo_limit=0)
        assert got.hosts == want.hosts
        assert got.steps[0].removed == want.steps[0].removed
        assert list(got.steps[0].removed) == list(want.steps[0].removed)
        assert got.steps[1].values == want.steps[1].values
        assert got.weights == want.weights


def test_the_limit_drops_the_least_recently_used_keys():
    p, asked, _ = pipeline()
    synced = fleet()
    for project in ("x", "y", "z"):
        run_pipeline(p, request(project=project), synced, memo_limit=10)
    asked.clear()
    run_pipeline(p, request(project="z"), synced, memo_limit=10)
    assert asked == ["e"]                        # the newest key is kept
    asked.clear()
    run_pipeline(p, request(project="x"), synced, memo_limit=10)
    assert sorted(asked) == ["a", "b", "c", "d", "e"]   # the oldest was dropped


def test_each_drop_past_the_limit_is_reported_with_its_answers():
    p, _, _ = pipeline()
    synced = fleet()
    drops = []
    for project in ("x", "y", "z", "z"):
        run_pipeline(p, request(project=project), synced, memo_limit=10,
                     memo_dropped=drops.append)
    # a table counts a host of the fleet each (5): x's filter and weigher tables fill the
    # limit; y and z each drop the oldest filter table, 5 answers; z again drops nothing
    assert drops == [5, 5]


def test_no_limit_keeps_nothing():
    p, asked, _ = pipeline()
    synced = fleet()
    run_pipeline(p, request(), synced, memo_limit=0)
    asked.clear()
    run_pipeline(p, request(), synced, memo_limit=0)
    assert sorted(asked) == ["a", "b", "c", "d", "e"]


def _held(store):
    return sum(len(t) for t in store._tables.values())


def test_a_table_dropped_while_a_call_fills_it_does_not_count():
    from cortex.pipeline.memo import AnswerStore

    store = AnswerStore(limit=25)
    early = store.table("early", 10)
    late = store.table("late", 10)
    assert store.size == 20 == _held(store)  # room for every host, however few judged
    store.table("later", 10)                 # past the limit: the early table goes
    assert store.size == 20 == _held(store)
    early.reserved["h1"] = (object(), None)  # a call still filling it
    store.grew(early)
    assert store.size == 20 == _held(store)
    late.reserved["h1"] = (object(), None)
    store.grew(late)
    store.grew(late)                         # counted again: nothing new
    assert store.size == 21 == _held(store)


def test_two_calls_filling_one_table_at_once_count_its_answers_once():
    import threading

    import numpy as np

    from cortex.pipeline.memo import UNKNOWN, AnswerStore, candidates_of, check_memoised
    from cortex.request import CandidateList

    store = AnswerStore(limit=1000)
    names = [f"h{i}" for i in range(20)]
    synced = view(*[host(name) for name in names])
    table = store.table(("step", "nova", ()), len(names))
    candidates = CandidateList(names, [()] * len(names), [0.0] * len(names))
    judged = candidates_of(candidates, synced, "nova")
    both = threading.Barrier(2)
    answers = []

    def check_all(pairs):
        both.wait(timeout=30)                # both calls found the same hosts unknown
        return {pairs[0][0].host: "no"}

    def call():
        answers.append(check_memoised(table, judged, np.arange(len(names)), check_all)[0])

    threads = [threading.Thread(target=call) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == [{"h0": "no"}, {"h0": "no"}]
    assert (table.codes != UNKNOWN).all() and store.size == 20 == _held(store)
    assert table.reasons == ["no"], "one reason numbered once"


def test_removed_hosts_come_in_the_callers_order_when_kept():
    import random

    rng = random.Random(5)
    names = [f"h{i:03d}" for i in range(300)]
    synced = view(*[host(h) for h in names])
    p, asked, _ = pipeline()
    project = ",".join(rng.sample(names, 120))
    run_pipeline(p, request(project, names), synced)
    for _ in range(3):
        offered = rng.sample(names, 250)
        asked.clear()
        removed = run_pipeline(p, request(project, offered), synced).steps[0].removed
        assert asked == []                       # every answer kept
        assert list(removed) == [h for h in offered if h in project.split(",")]
        assert set(removed.values()) == {"named"}


def test_kept_answers_equal_fresh_ones_for_many_hosts():
    """Many removed and many reserved hosts: kept answers patched into the columns."""
    import random

    rng = random.Random(11)
    names = [f"h{i:03d}" for i in range(5 * MANY)]
    synced = view(*[host(h, inventories={"VCPU": inventory(64, used=i % 7)})
                    for i, h in enumerate(names)])
    kept, _, _ = pipeline()
    fresh, _, _ = pipeline()
    project = ",".join(rng.sample(names, MANY + 16))     # removes MANY + 16
    reserved = rng.sample(names, 3 * MANY)                  # > MANY still alive
    reservations = [reserve(f"r{h}", h, 1 + i % 5) for i, h in enumerate(reserved)]
    for _ in range(3):                          # asked, then kept on the same reserved states
        overlaid = with_reservations(synced, reservations, NOW)
        offered = rng.sample(names, len(names))
        got = run_pipeline(kept, request(project, offered), overlaid)
        want = run_pipeline(fresh, request(project, offered), overlaid, memo_limit=0)
        assert len(got.steps[0].removed) > MANY
        assert len(set(reserved) & set(got.weighed)) > MANY
        assert list(got.steps[0].removed.items()) == list(want.steps[0].removed.items())
        assert got.steps[1].values == want.steps[1].values and got.hosts == want.hosts
        assert got.weights == want.weights       # kept tanh terms: the same floats


def test_judged_pairs_are_the_known_candidates_with_their_states():
    from cortex.pipeline.memo import candidates_of
    from cortex.request import Candidate, CandidateList

    synced = view(*[host(name) for name in ("h0", "h1", "h2", "h3")])
    candidates = CandidateList(["h3", "gone", "h1", "h0"], [("n3",), (), (), ("n0",)],
                               [0.5, 1.0, -1.0, 2.0])
    judged = candidates_of(candidates, synced, "nova")
    assert judged.at == [0, 2, 3] and judged.names == ["h3", "h1", "h0"]  # "gone" unknown
    pairs = judged.pairs_of([2, 0])
    expected = [(Candidate("h0", ("n0",), 2.0), synced.hosts["h0"]),
                (Candidate("h3", ("n3",), 0.5), synced.hosts["h3"])]
    assert len(pairs) == 2 and list(pairs) == expected
    assert pairs[1] == expected[1] and pairs[-2] == expected[0] and pairs[1:] == expected[1:]
    assert list(judged.pairs_of([1])) == [(Candidate("h1", (), -1.0), synced.hosts["h1"])]
    everything = candidates_of(CandidateList(["h2", "h0"], [(), ()], [0.0, 0.0]), synced,
                               "nova")
    assert everything.at is None and everything.positions.tolist() == [2, 0]
    assert [(c.host, s) for c, s in everything.pairs_of(range(2))] == [
        ("h2", synced.hosts["h2"]), ("h0", synced.hosts["h0"])]


@dataclass(frozen=True)
class NonFiniteOptions:
    """``memo``: whether the weigher's answers are kept; ``value``: the weight of "c"."""

    memo: bool = True
    value: float = float("inf")


@register
class NonFiniteWeigher(Weigher):
    """Weighs every host 1, but "c" ``value``."""

    name = "test_non_finite_weigher"
    Options = NonFiniteOptions

    def memo_key(self, request):
        return () if self.options.memo else None

    def weigh(self, host, request, candidate):
        return self.options.value if candidate.host == "c" else 1.0


@pytest.mark.parametrize("memo", [True, False], ids=["kept", "asked"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_a_non_finite_weight_fails_the_weigher_kept_or_asked(memo, value):
    spec = {"service": "nova", "weighers": [
        {"name": "test_non_finite_weigher", "options": {"memo": memo, "value": value}}]}
    built = build_pipelines({"defaults": {"nova": "p"}, "pipelines": {"p": spec}}).pipelines["p"]
    synced = fleet()
    for _ in range(2):  # the second call takes the kept answers, where they are kept
        result = run_pipeline(built, request(hosts=HOSTS), synced)
        step = result.steps[-1]
        assert step.status == "error" and step.values is None
        assert f"weight {value} for c is not finite" in step.reason
        assert sorted(result.hosts) == sorted(HOSTS)
