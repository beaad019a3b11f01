"""Network domains for groups: where locations come from, the domain rule, filter and weigher."""

import dataclasses
import logging
from datetime import UTC, datetime, timedelta
from types import MappingProxyType

import pytest

from cortex.knowledge.network import (
    SOURCE_AGGREGATE,
    SOURCE_FILE,
    SOURCE_PROMETHEUS,
    MetadataKeys,
    NetworkTopologyError,
    build_topology,
    parse_topology,
    read_topology_file,
)
from cortex.knowledge.reservations import Reservation, with_reservations
from cortex.plugins.base import build_options
from cortex.plugins.filters.network_domain import NetworkDomainFilter
from cortex.plugins.weighers.network_domain import NetworkDomainWeigher
from cortex.request import BadRequest
from cortex.request.base import Candidate
from cortex.rules.network_domains import leaves_needed, plan_group
from tests.conftest import REPO
from tests.fakes import aggregate, host, inventory, nova, view

NOW = datetime(2026, 1, 1, tzinfo=UTC)
# 4 leaves of 4 hosts in a chain l1 - l2 - l3 - l4 under one spine; l4 has a slow uplink.
CHAIN = {"spines": {"s1": {"uplink_gbps": 3200}}, "leaves": {
    f"l{i}": {"spine": "s1", "uplink_gbps": 400 if i == 4 else 1600,
              "hosts": [f"h{i}{j}" for j in range(4)],
              "adjacent": [f"l{k}" for k in (i - 1, i + 1) if 1 <= k <= 4]}
    for i in range(1, 5)}}


@pytest.mark.parametrize("size, leaves", [
    (1, 1), (2, 1), (3, 1), (4, 1),      # 2 nodes in one leaf; 4 fill one leaf
    (5, 2), (8, 2),                      # 8 nodes: two adjacent leaves
    (9, 4), (16, 4),                     # 16 nodes: four adjacent leaves; between rounds up
    (17, 8),
])
def test_the_reference_rule_by_group_size(size, leaves):
    assert leaves_needed(size) == leaves


def test_leaf_size_and_gpu_limits_change_the_rule():
    assert leaves_needed(8, hosts_per_leaf=8) == 1
    assert leaves_needed(4, gpus_per_member=8, gpus_per_leaf=16) == 2


def test_aggregate_metadata_comes_before_the_file():
    aggregates = {"h10": [aggregate("a", **{"topology:leaf": "rack-9",
                                             "topology:spine": "s2",
                                             "topology:uplink_gbps": "800"})]}
    network = build_topology(aggregates, parse_topology(CHAIN))
    assert network.locations["h10"].leaf == "rack-9"
    assert network.locations["h10"].source == SOURCE_AGGREGATE
    assert network.locations["h11"].leaf == "l1"
    assert network.locations["h11"].source == SOURCE_FILE
    assert network.leaves["rack-9"].uplink_gbps == 800.0
    assert network.leaves["l1"].adjacent == {"l2"}


def test_aggregates_then_the_file_then_prometheus():
    aggregates = {"h10": [aggregate("a", **{"topology:leaf": "rack-9"})]}
    prometheus = {"spines": {"sp": {"uplink_gbps": None}}, "leaves": {
        "p1": {"spine": "sp", "block": "nvl-p", "uplink_gbps": 400,
               "hosts": ["h10", "h11", "x1"]},
        "l2": {"hosts": ["x2"]}}}  # a leaf the file defines: only hosts
    network = build_topology(aggregates, parse_topology(CHAIN), MetadataKeys(), prometheus)
    where = {h: (network.locations[h].leaf, network.locations[h].spine,
                 network.locations[h].block, network.locations[h].source)
             for h in ("h10", "h11", "x1", "x2")}
    assert where == {"h10": ("rack-9", None, None, SOURCE_AGGREGATE),
                     "h11": ("l1", "s1", None, SOURCE_FILE),
                     "x1": ("p1", "sp", "nvl-p", SOURCE_PROMETHEUS),
                     "x2": ("l2", "s1", None, SOURCE_PROMETHEUS)}
    assert network.leaves["l2"].source == SOURCE_FILE
    assert network.leaves["l2"].adjacent == {"l1", "l3"}
    assert "x2" in network.leaves["l2"].hosts
    assert network.leaves["p1"].hosts == ("x1",)
    assert network.spines == {"s1": 3200, "sp": None}


def test_configured_keys_and_same_spine_adjacency():
    keys = MetadataKeys(leaf="net:tor", spine="net:spine")
    aggregates = {h: [aggregate("a", **{"net:tor": leaf, "net:spine": "sp"})]
                  for h, leaf in (("a1", "t1"), ("a2", "t2"), ("a3", "t3"))}
    network = build_topology(aggregates, None, keys)
    assert network.leaves["t1"].adjacent == {"t2", "t3"}
    assert build_topology(aggregates, None).locations == {}  # default keys: not placed


@pytest.mark.parametrize("document, fragment", [
    ({"leaves": {}}, "should be non-empty"),
    ({"leaves": {"l1": {"hosts": ["a"]}, "l2": {"hosts": ["a"]}}}, "host a is in leaves"),
    ({"leaves": {"l1": {"hosts": ["a"], "adjacent": ["l9"]}}}, "unknown adjacent leaf l9"),
    ({"leaves": {"l1": {"hosts": ["a"], "uplink_gbps": -1}}}, "uplink_gbps"),
    ({"leaves": {"l1": {"hosts": ["a"], "rack": 1}}}, "Additional properties"),
])
def test_bad_topology_documents_say_why(document, fragment):
    with pytest.raises(NetworkTopologyError, match=fragment):
        parse_topology(document)


def test_the_shipped_topology_file_parses():
    document = read_topology_file(REPO / "etc" / "cortex" / "network-topology.yaml")
    assert document["leaves"]["leaf-01"]["hosts"][0] == "cmp0000"


@pytest.mark.parametrize("hints, fragment", [
    ({"placement_strategy": ["packed"]}, "placement_strategy"),
    ({"group_size": ["many"]}, "group_size"),
    ({"network_bandwidth": ["-5"]}, "network_bandwidth"),
    ({"network_bandwidth": ["nan"]}, "network_bandwidth"),
    ({"latency_sensitive": ["maybe"]}, "latency_sensitive"),
])
def test_bad_hints_are_bad_requests(hints, fragment):
    with pytest.raises(BadRequest, match=fragment):
        nova(spec={"scheduler_hints": hints})


def test_group_of_a_multi_create_is_its_request():
    request = nova(spec={"num_instances": 3, "scheduler_hints": {"latency_sensitive": "yes"}})
    assert request.network.group_size == 3
    assert request.network.group_id == f"request:{request.global_request_id or request.request_id}"
    assert request.network.latency_sensitive


def fleet(used=None, failed=()):
    """16 hosts on the chain, each with room for 8 of the 4-VCPU, 8 GiB flavor; ``used`` slots."""
    used = used or {}
    hosts = [host(f"h{i}{j}", inventories={
        "VCPU": inventory(32, used=4 * used.get(f"h{i}{j}", 0)),
        "MEMORY_MB": inventory(8 * 8192, used=8192 * used.get(f"h{i}{j}", 0)),
        "DISK_GB": inventory(8 * 80)}, failed_builds=int(f"h{i}{j}" in failed))
        for i in range(1, 5) for j in range(4)]
    base = view(*hosts)
    return dataclasses.replace(base, network=build_topology({}, parse_topology(CHAIN)))


def group_request(size, strategy="consolidated", uuid="i-new", **hints):
    names = [f"h{i}{j}" for i in range(1, 5) for j in range(4)]
    all_hints = {"placement_strategy": [strategy]} | {k: [v] for k, v in hints.items()}
    return nova(hosts=names, spec={"num_instances": size, "instance_uuid": uuid,
                                   "scheduler_hints": all_hints})


OPTIONS = build_options(NetworkDomainFilter, {})


def test_a_pair_goes_to_one_leaf_and_prefers_a_used_leaf_that_fits():
    # l3 is half used: the pair fits there and leaves the empty leaves whole
    plan = plan_group(group_request(2), fleet({"h30": 8, "h31": 8}), OPTIONS)
    assert plan.domain == {"l3"} and plan.rule_leaves == 1


def test_eight_take_two_adjacent_leaves():
    plan = plan_group(group_request(8), fleet(), OPTIONS)
    assert len(plan.domain) == 2
    first, second = sorted(plan.domain)
    assert second in CHAIN["leaves"][first]["adjacent"]


def test_a_full_leaf_is_not_chosen_when_another_fits():
    full = {f"h1{j}": 8 for j in range(4)} | {f"h2{j}": 8 for j in range(4)}
    plan = plan_group(group_request(4), fleet(full), OPTIONS)
    assert plan.domain.isdisjoint({"l1", "l2"})


def test_history_breaks_a_tie_between_equal_leaves():
    failed = {f"h1{j}" for j in range(4)} | {f"h2{j}" for j in range(4)} | {"h40"}
    plan = plan_group(group_request(4), fleet(failed=failed), OPTIONS)
    assert plan.domain == {"l3"}


def test_siblings_reservations_pull_the_group_into_their_leaf():
    request = group_request(4, uuid="i-3")
    group = request.network.group_id
    siblings = [Reservation(f"r{i}", "h42", f"i-{i}", group, MappingProxyType({"VCPU": 4}),
                            (), NOW, NOW + timedelta(minutes=5)) for i in (1, 2)]
    overlaid = with_reservations(fleet(), siblings, NOW)
    assert plan_group(request, overlaid, OPTIONS).domain == {"l4"}
    assert plan_group(request, fleet(), OPTIONS).domain != {"l4"}  # without them: the best leaf


def verdicts(plugin, request, knowledge):
    bound = plugin.bind(request, knowledge)
    call = bound.check if hasattr(bound, "check") else bound.weigh
    return {name: call(state, request, Candidate(name, (), 0.0))
            for name, state in knowledge.hosts.items()}


def test_the_filter_is_hard_only_for_latency_sensitive_requests():
    knowledge = fleet({"h30": 8, "h31": 8})
    soft = verdicts(NetworkDomainFilter(OPTIONS), group_request(2), knowledge)
    assert all(v is None for v in soft.values())
    hard = verdicts(NetworkDomainFilter(OPTIONS),
                    group_request(2, latency_sensitive="true"), knowledge)
    assert {h for h, v in hard.items() if v is None} == {f"h3{j}" for j in range(4)}
    assert "outside the group's domain l3" in hard["h10"]


def test_bandwidth_hint_removes_slow_leaves_always():
    result = verdicts(NetworkDomainFilter(OPTIONS),
                      group_request(2, network_bandwidth="800"), fleet())
    assert {h for h, v in result.items() if v} == {f"h4{j}" for j in range(4)}
    assert "uplink below 800 Gbit/s" in result["h40"]


def test_distributed_caps_members_per_leaf():
    request = group_request(4, strategy="distributed", uuid="i-9")
    group = request.network.group_id
    taken = [Reservation("r1", "h10", "i-1", group, MappingProxyType({}), (), NOW,
                         NOW + timedelta(minutes=5))]
    knowledge = with_reservations(fleet(), taken, NOW)
    hard = build_options(NetworkDomainFilter, {"hard": True})
    result = verdicts(NetworkDomainFilter(hard), request, knowledge)
    assert {h for h, v in result.items() if v} == {f"h1{j}" for j in range(4)}
    weights = verdicts(NetworkDomainWeigher(OPTIONS), request, knowledge)
    assert weights["h11"] == 0.0 and weights["h21"] == 1.0


def test_the_weigher_prefers_the_domain_then_its_neighbours():
    weights = verdicts(NetworkDomainWeigher(OPTIONS), group_request(2),
                       fleet({"h30": 8, "h31": 8}))
    assert weights["h32"] == 1.0 and weights["h22"] == 0.5 and weights["h12"] == 0.0
    balanced = verdicts(NetworkDomainWeigher(OPTIONS), group_request(2, strategy="balanced"),
                        fleet({"h30": 8, "h31": 8}))
    assert balanced["h32"] == 0.5


def test_no_topology_no_effect():
    request = group_request(2, latency_sensitive="true")
    plain = view(*fleet().hosts.values())
    assert all(v is None for v in verdicts(NetworkDomainFilter(OPTIONS), request, plain).values())


def test_options_are_checked():
    for bad in ({"strategy": "packed"}, {"hosts_per_leaf": 0}, {"score_weights": {"x": 1.0}}):
        with pytest.raises(ValueError):
            build_options(NetworkDomainFilter, bad)


def test_the_former_spelling_of_a_score_weight_is_read(caplog):
    with caplog.at_level(logging.WARNING, logger="cortex.plugins.network_options"):
        options = build_options(NetworkDomainFilter, {"score_weights": {"utilisation": 0.5}})
    assert options.score_weights == {"utilization": 0.5}
    assert "'utilisation' is deprecated" in caplog.text
