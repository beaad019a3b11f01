"""Pipeline engine: ordering, ties, multipliers, passthrough, failure policies, shadow mode."""

import math
from dataclasses import dataclass

import pytest

from cortex.pipeline.config import PipelineConfigError, build_pipelines
from cortex.pipeline.engine import StepFailed, run_pipeline
from cortex.plugins.base import Filter, Weigher
from cortex.plugins.registry import FILTERS, WEIGHERS, register
from tests.fakes import host, inventory, nova, pool, storage, view


@dataclass(frozen=True)
class TableOptions:
    values: dict[str, float]


@register
class TableWeigher(Weigher):
    """Test weigher: raw weight from a table in its options."""

    name = "test_table"
    services = ("nova", "cinder")
    Options = TableOptions

    def weigh(self, host, request, candidate):
        return self.options.values[candidate.host]


@dataclass(frozen=True)
class RemoveOptions:
    hosts: list[str]


@register
class RemoveFilter(Filter):
    """Test filter: removes the hosts named in its options."""

    name = "test_remove"
    Options = RemoveOptions

    def check(self, host, request, candidate):
        return "listed" if candidate.host in self.options.hosts else None


@register
class BrokenFilter(Filter):
    """Test filter that raises."""

    name = "test_broken_filter"

    def check(self, host, request, candidate):
        raise RuntimeError("boom")


@register
class BrokenWeigher(Weigher):
    """Test weigher that raises."""

    name = "test_broken_weigher"

    def weigh(self, host, request, candidate):
        raise RuntimeError("boom")


HOSTS = ["a", "b", "c", "d"]


def pipeline(filters=(), weighers=(), unknown_hosts=None, service="nova"):
    spec = {"service": service, "filters": list(filters), "weighers": list(weighers)}
    if unknown_hosts:
        spec["unknown_hosts"] = unknown_hosts
    return build_pipelines({"defaults": {service: "p"}, "pipelines": {"p": spec}}).pipelines["p"]


def run(p, weights, known=HOSTS, hosts=HOSTS, policy="keep"):
    request = nova(hosts=hosts, weights=weights)
    return run_pipeline(p, request, view(*(host(h) for h in known)), policy)


def test_no_weighers_passes_caller_order_by_weight():
    result = run(pipeline(), {"a": 0.1, "b": 3.0, "c": -2.0, "d": 1.0})
    assert result.hosts == ["b", "d", "a", "c"]


def test_saturated_tanh_ties_break_by_caller_weight_then_order():
    # tanh(30) == tanh(40) == 1.0 in floating point: the caller's weight decides
    result = run(pipeline(), {"a": 30.0, "b": 40.0, "c": 5.0, "d": 5.0})
    assert math.tanh(30.0) == math.tanh(40.0)
    assert result.hosts == ["b", "a", "c", "d"]


def test_equal_weights_keep_caller_order():
    result = run(pipeline(), {h: 0.0 for h in HOSTS}, hosts=["c", "a", "d", "b"])
    assert result.hosts == ["c", "a", "d", "b"]


def test_final_weight_is_tanh_sum_with_multiplier():
    raw = {"a": 0.0, "b": 1.0, "c": 2.0, "d": -1.0}
    weigher = {"name": "test_table", "multiplier": 2.0, "options": {"values": raw}}
    weights = {"a": 0.5, "b": 0.0, "c": -1.0, "d": 2.0}
    result = run(pipeline(weighers=[weigher]), weights)
    expected = {h: math.tanh(weights[h]) + 2.0 * math.tanh(raw[h]) for h in HOSTS}
    assert result.weights == pytest.approx(expected)
    assert result.hosts == sorted(HOSTS, key=lambda h: -expected[h])
    step = result.steps[0]
    assert step.raw == raw and step.scaled["c"] == pytest.approx(2.0 * math.tanh(2.0))


def test_negative_multiplier_inverts_preference():
    raw = {"a": 0.1, "b": 0.9, "c": 0.5, "d": 0.3}
    up = run(pipeline(weighers=[{"name": "test_table", "options": {"values": raw}}]),
             {h: 0.0 for h in HOSTS})
    down = run(pipeline(weighers=[{"name": "test_table", "multiplier": -1.0,
                                   "options": {"values": raw}}]), {h: 0.0 for h in HOSTS})
    assert up.hosts == ["b", "c", "d", "a"]
    assert down.hosts == list(reversed(up.hosts))


def test_filter_removes_with_reason_and_records_it():
    result = run(pipeline(filters=[{"name": "test_remove", "options": {"hosts": ["b", "c"]}}]),
                 {h: 0.0 for h in HOSTS})
    assert result.hosts == ["a", "d"]
    assert result.steps[0].removed == {"b": "listed", "c": "listed"}


def test_every_host_removed_answers_empty_list():
    result = run(pipeline(filters=[{"name": "test_remove", "options": {"hosts": HOSTS}}]),
                 {h: 0.0 for h in HOSTS})
    assert result.hosts == []


def test_shadow_filter_records_but_keeps():
    step = {"name": "test_remove", "shadow": True, "options": {"hosts": ["b"]}}
    result = run(pipeline(filters=[step]), {"a": 0.0, "b": 1.0, "c": 0.0, "d": 0.0})
    assert result.hosts[0] == "b"
    assert result.steps[0].removed == {"b": "listed"} and result.steps[0].shadow


def test_failing_filter_fails_closed_by_default():
    with pytest.raises(StepFailed, match="test_broken_filter"):
        run(pipeline(filters=[{"name": "test_broken_filter"}]), {h: 0.0 for h in HOSTS})


def test_failing_filter_fail_open_keeps_hosts_and_records_error():
    result = run(pipeline(filters=[{"name": "test_broken_filter", "on_error": "skip"}]),
                 {"a": 1.0, "b": 0.0, "c": 0.0, "d": 0.0})
    assert result.hosts == HOSTS
    assert result.steps[0].status == "error" and "boom" in result.steps[0].reason


def test_failing_weigher_is_skipped_without_partial_effect():
    weighers = [{"name": "test_broken_weigher", "multiplier": 5.0}]
    result = run(pipeline(weighers=weighers), {"a": 0.0, "b": 2.0, "c": 1.0, "d": 0.0})
    assert result.hosts == ["b", "c", "a", "d"]
    assert result.steps[0].status == "error" and result.steps[0].scaled == {}


def test_weigher_can_be_configured_fail_closed():
    with pytest.raises(StepFailed):
        run(pipeline(weighers=[{"name": "test_broken_weigher", "on_error": "fail"}]),
            {h: 0.0 for h in HOSTS})


def test_unknown_hosts_kept_after_judged_ones_by_weight():
    result = run(pipeline(), {"a": 0.0, "b": 9.0, "c": 1.0, "d": 2.0}, known=["a", "c"])
    assert result.hosts == ["c", "a", "b", "d"]
    assert result.unknown_hosts == ["b", "d"]


def test_unknown_hosts_dropped_by_policy():
    result = run(pipeline(), {"a": 0.0, "b": 9.0, "c": 1.0, "d": 2.0}, known=["a", "c"],
                 policy="drop")
    assert result.hosts == ["c", "a"]
    pinned = run(pipeline(unknown_hosts="keep"), {"a": 0.0, "b": 9.0, "c": 1.0, "d": 2.0},
                 known=["a", "c"], policy="drop")
    assert pinned.hosts == ["c", "a", "b", "d"]


def test_filter_not_applicable_is_recorded_as_skipped():
    result = run(pipeline(filters=[{"name": "filter_host_instructions"}]),
                 {h: 0.0 for h in HOSTS})
    assert result.steps[0].status == "skipped"
    assert result.steps[0].reason == "not applicable to this request"


def test_rebuild_skips_filters_not_run_on_rebuild():
    request = nova("cpu-evacuate", hosts=HOSTS,
                   spec={"scheduler_hints": {"_nova_check_type": ["rebuild"]},
                         "force_hosts": ["a"]}, rebuild=True)
    p = pipeline(filters=[{"name": "filter_status"}])
    result = run_pipeline(p, request, view(*(host(h, enabled=False) for h in HOSTS)))
    assert result.steps[0].reason == "not run on rebuild" and len(result.hosts) == 4


def test_binpack_prefers_fuller_host_and_spreads_when_negative():
    inv = {"a": 10, "b": 50, "c": 30, "d": 0}
    hosts_ = [host(h, inventories={"VCPU": inventory(64, used=inv[h]),
                                   "MEMORY_MB": inventory(65536, used=inv[h] * 1024)})
              for h in HOSTS]
    request = nova(hosts=HOSTS)
    pack = pipeline(weighers=[{"name": "weigher_binpack"}])
    spread = pipeline(weighers=[{"name": "weigher_binpack", "multiplier": -1.0}])
    assert run_pipeline(pack, request, view(*hosts_)).hosts == ["b", "c", "a", "d"]
    assert run_pipeline(spread, request, view(*hosts_)).hosts == ["d", "a", "c", "b"]


def test_pool_free_capacity_prefers_free_space():
    pools = [pool("p1", free=100), pool("p2", free=900), pool("p3", free=500)]
    request = storage("cinder", "create-volume-default-type", hosts=["p1", "p2", "p3"])
    p = pipeline(weighers=[{"name": "weigher_pool_free_capacity"}], service="cinder")
    assert run_pipeline(p, request, view(pools=pools)).hosts == ["p2", "p3", "p1"]


@pytest.mark.parametrize("document, message", [
    ({"defaults": {"nova": "p"}, "pipelines": {"p": {"service": "nova",
      "filters": [{"name": "filter_nope"}]}}}, "unknown filter 'filter_nope'"),
    ({"defaults": {"nova": "p"}, "pipelines": {"p": {"service": "nova",
      "weighers": [{"name": "weigher_binpack", "options": {"resource_weight": {}}}]}}},
     "unknown option(s) resource_weight"),
    ({"defaults": {"nova": "p"}, "pipelines": {"p": {"service": "nova",
      "weighers": [{"name": "weigher_binpack", "options": {"resource_weights": {"VCPU": "x"}}}]}}},
     "is not dict[str, float]"),
    ({"defaults": {"nova": "p"}, "pipelines": {"p": {"service": "nova",
      "weighers": [{"name": "weigher_binpack", "options": {"resource_weights": {"VCPU": -1}}}]}}},
     "must be >= 0"),
    ({"defaults": {"nova": "p"}, "pipelines": {"p": {"service": "nova",
      "filters": [{"name": "filter_capacity"}]}}}, "serves cinder, manila, not nova"),
    ({"defaults": {"nova": "q"}, "pipelines": {"p": {"service": "nova"}}},
     "unknown pipeline 'q'"),
    ({"defaults": {"cinder": "p"}, "pipelines": {"p": {"service": "nova"}}},
     "is for nova, not cinder"),
    ({"defaults": {"nova": "p"}, "pipelines": {"p": {"service": "nova",
      "filters": [{"name": "filter_status", "multiplier": 2}]}}}, "takes no multiplier"),
    ({"defaults": {"nova": "p"}, "pipelines": {"p": {"service": "nova",
      "filters": [{"name": "filter_status", "on_error": "explode"}]}}}, "on_error"),
    ({"defaults": {"nova": "p"}}, "'pipelines' is a required property"),
])
def test_bad_pipeline_configuration_fails_with_clear_message(document, message):
    with pytest.raises(PipelineConfigError) as info:
        build_pipelines(document)
    assert message in str(info.value)


def test_registry_has_in_tree_plugins():
    build_pipelines({"defaults": {"nova": "p"}, "pipelines": {"p": {"service": "nova"}}})
    assert {"filter_status", "filter_has_enough_capacity", "filter_capacity"} <= set(FILTERS)
    assert {"weigher_binpack", "weigher_pool_free_capacity"} <= set(WEIGHERS)


def test_entry_point_plugins_are_registered(monkeypatch):
    from cortex.plugins import registry

    class FakeEntryPoint:
        name = "weigher_from_outside"

        def load(self):
            class Outside(Weigher):
                """Out-of-tree weigher."""

                def weigh(self, host, request, candidate):
                    return 1.0

            return Outside

    monkeypatch.setattr(registry, "entry_points",
                        lambda group: [FakeEntryPoint()] if group == "cortex.weighers" else [])
    monkeypatch.delitem(WEIGHERS, "weigher_from_outside", raising=False)
    registry.load_entry_points()
    assert WEIGHERS.pop("weigher_from_outside").name == "weigher_from_outside"


def test_entry_point_that_is_not_a_plugin_is_refused(monkeypatch):
    from cortex.plugins import registry

    class Bad:
        name = "bad"

        def load(self):
            return object

    monkeypatch.setattr(registry, "entry_points",
                        lambda group: [Bad()] if group == "cortex.filters" else [])
    with pytest.raises(registry.PluginError, match="is not a Filter"):
        registry.load_entry_points()


@register
class NeighbourWeigher(Weigher):
    """Test weigher: binds to the view and weighs how many known hosts the request offers."""

    name = "test_neighbours"
    bound_to = None

    def bind(self, request, view):
        bound = NeighbourWeigher(self.options)
        bound.bound_to = sum(1 for c in request.candidates if c.host in view.hosts)
        return bound

    def weigh(self, host, request, candidate):
        return float(self.bound_to)


def test_plugins_bind_once_per_request_to_the_view():
    p = pipeline(weighers=[{"name": "test_neighbours"}])
    result = run(p, {h: 0.0 for h in HOSTS}, known=["a", "b"])
    assert result.steps[0].raw == {"a": 2.0, "b": 2.0}
    assert p.weighers[0].plugin.bound_to is None   # the configured plugin stays untouched


def test_capabilities_table_follows_the_view_not_its_version_number():
    from tests.fakes import inventory

    p = pipeline(filters=[{"name": "filter_compute_capabilities"}])
    request = nova(hosts=["a"], flavor={"extra_specs": {"capabilities:vcpus_total": ">= 32"}})
    small = view(host("a", inventories={"VCPU": inventory(8)}), version=7)
    big = view(host("a", inventories={"VCPU": inventory(64)}), version=7)
    assert run_pipeline(p, request, small).hosts == []
    assert run_pipeline(p, request, big).hosts == ["a"]
    assert run_pipeline(p, request, small).hosts == []
