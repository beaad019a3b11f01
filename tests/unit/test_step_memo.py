"""The engine keeps the answers of steps with a memo key (cortex.pipeline.memo)."""

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from cortex.knowledge.reservations import Reservation, with_reservations
from cortex.pipeline.config import build_pipelines
from cortex.pipeline.engine import run_pipeline
from cortex.plugins.base import Filter, Weigher
from cortex.plugins.registry import register
from tests.fakes import host, inventory, nova, view

NOW = datetime(2026, 1, 1, tzinfo=UTC)
HOSTS = ["a", "b", "c", "d"]


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


def test_hosts_an_overlay_changed_are_asked_each_time():
    p, asked, weighed = pipeline()
    synced = fleet()
    run_pipeline(p, request(), synced)
    reservation = Reservation("r1", "c", "i1", None, {"VCPU": 30}, (), NOW,
                              NOW + timedelta(minutes=5))
    overlaid = with_reservations(synced, [reservation], NOW)
    assert overlaid.overlaid == {"c"}
    asked.clear()
    weighed.clear()
    result = run_pipeline(p, request(), overlaid)
    assert sorted(asked) == ["c", "e"] and sorted(weighed) == ["c", "e"]
    assert result.steps[1].raw["c"] == 32.0      # the reserved state, not the synced one
    asked.clear()
    run_pipeline(p, request(), synced)
    assert asked == ["e"]                        # the overlay's answer was not kept


def test_the_limit_drops_the_least_recently_used_keys():
    p, asked, _ = pipeline()
    synced = fleet()
    for project in ("x", "y", "z"):
        run_pipeline(p, request(project=project), synced, memo_limit=8)
    asked.clear()
    run_pipeline(p, request(project="z"), synced, memo_limit=8)
    assert asked == ["e"]                        # the newest key is kept
    asked.clear()
    run_pipeline(p, request(project="x"), synced, memo_limit=8)
    assert sorted(asked) == ["a", "b", "c", "d", "e"]   # the oldest was dropped


def test_no_limit_keeps_nothing():
    p, asked, _ = pipeline()
    synced = fleet()
    run_pipeline(p, request(), synced, memo_limit=0)
    asked.clear()
    run_pipeline(p, request(), synced, memo_limit=0)
    assert sorted(asked) == ["a", "b", "c", "d", "e"]
