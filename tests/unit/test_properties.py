"""Properties of the pipeline over generated requests (hypothesis).

Whatever the hosts, weights and knowledge: the answer names only requested hosts,
each once; it is the same for the same input; with no weighers it is the caller's
ranking; unknown hosts follow the policy.
"""

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cortex.pipeline.config import build_pipelines
from cortex.pipeline.engine import run_pipeline
from tests.fakes import host, inventory, nova, view

NAMES = st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True), min_size=0,
                 max_size=40, unique=True)
WEIGHTS = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6)

PIPELINES = build_pipelines({
    "defaults": {"nova": "full"},
    "pipelines": {
        "full": {"service": "nova", "filters": [
            {"name": "filter_host_instructions"}, {"name": "filter_correct_az"},
            {"name": "filter_status"}, {"name": "filter_has_requested_traits"},
            {"name": "filter_has_enough_capacity"}],
            "weighers": [{"name": "weigher_binpack", "multiplier": -1.5}]},
        "bare": {"service": "nova"},
    }}).pipelines


@st.composite
def scenario(draw):
    names = draw(NAMES)
    weights = {n: draw(WEIGHTS) for n in names}
    known = [n for n in names if draw(st.booleans())]
    states = [host(n, az=draw(st.sampled_from(["az-1", "az-2", None])),
                   enabled=draw(st.booleans()), up=draw(st.booleans()),
                   inventories={"VCPU": inventory(draw(st.integers(1, 64)),
                                                  used=draw(st.integers(0, 64))),
                                "MEMORY_MB": inventory(draw(st.integers(1024, 65536))),
                                "DISK_GB": inventory(draw(st.integers(10, 500)))})
              for n in known]
    ignore = draw(st.lists(st.sampled_from(names), max_size=3)) if names else []
    request = nova(hosts=names, weights=weights, spec={"ignore_hosts": ignore or None})
    return request, view(*states), names, set(known)


SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(scenario(), st.sampled_from(["keep", "drop"]))
def test_answer_is_a_duplicate_free_subset(case, policy):
    request, knowledge, names, known = case
    hosts = run_pipeline(PIPELINES["full"], request, knowledge, policy).hosts
    assert len(hosts) == len(set(hosts))
    assert set(hosts) <= set(names)
    unknown = set(names) - known
    if policy == "keep":
        assert unknown <= set(hosts)
        assert hosts[len(hosts) - len(unknown):] == [h for h in hosts if h in unknown]
    else:
        assert not unknown & set(hosts)


@SETTINGS
@given(scenario())
def test_same_input_same_answer(case):
    request, knowledge, _, _ = case
    first = run_pipeline(PIPELINES["full"], request, knowledge).hosts
    assert run_pipeline(PIPELINES["full"], request, knowledge).hosts == first


@SETTINGS
@given(scenario())
def test_without_steps_the_callers_ranking_passes_through(case):
    request, knowledge, names, _ = case
    hosts = run_pipeline(PIPELINES["bare"], request, knowledge, "keep").hosts
    weights = {c.host: c.weight for c in request.candidates}
    order = {n: i for i, n in enumerate(names)}
    assert sorted(hosts) == sorted(names)
    ranks = [(-math.tanh(weights[h]), -weights[h], order[h]) for h in hosts]
    known = [r for h, r in zip(hosts, ranks, strict=True) if h in knowledge.hosts]
    assert known == sorted(known)
