"""Every shipped pipeline, end to end: the bundled bodies against the demo fleet.

Each bundled body of a pipeline's service is posted with an explicit ``pipeline``;
the answer must be a valid, non-empty ranking that agrees with the decision record
(every removed host gone, the rest ordered by final weight). Then, where the demo
fleet makes the outcome clear (its header documents why), the expected hosts and
orders. "Neutral caller" tests set every caller weight to 0 so that the order is
the pipeline's own.
"""

import copy
import math

import pytest

from cortex import conf
from cortex.api.schema import RequestValidator, load_openapi
from cortex.pipeline.config import load_pipelines
from tests.api.test_contract import post
from tests.conftest import FIXTURES, bodies, load_body
from tests.waiting import DEADLINE

SHIPPED = load_pipelines(conf.shipped_file("pipelines.yaml")).pipelines
# The kubernetes pipelines take the extender's bodies: tests/api/test_kubernetes.py.
CASES = [(name, path) for name, p in sorted(SHIPPED.items()) for path in bodies(p.service)
         if "1000-hosts" not in path.name and p.service != "kubernetes"]
VALIDATOR = RequestValidator(load_openapi())


def decide(client, app, service, body):
    """Post ``body``; return (answer hosts, decision record)."""
    response = post(client, service, body)
    assert response.status_code == 200, response.get_data(as_text=True)
    assert VALIDATOR.response_errors(response.get_json()) == []
    app.extensions["cortex"].decisions.flush(DEADLINE)
    decision = client.get(f"/v1/decisions/{response.headers['x-cortex-decision-id']}")
    return response.get_json()["hosts"], decision.get_json()


def fixture(service, name, pipeline=None, neutral=False):
    body = copy.deepcopy(load_body(FIXTURES / service / f"{name}.json"))
    if pipeline:
        body["pipeline"] = pipeline
    if neutral:
        body["weights"] = {h: 0.0 for h in body["weights"]}
    return body


def removed_by(decision, step):
    return next(s for s in decision["steps"] if s["name"] == step).get("removed", {})


@pytest.mark.parametrize("pipeline, path", CASES,
                         ids=[f"{n}-{p.stem}" for n, p in CASES])
def test_every_pipeline_ranks_every_bundled_body(client, app, pipeline, path):
    service = SHIPPED[pipeline].service
    body = load_body(path) | {"pipeline": pipeline}
    hosts, decision = decide(client, app, service, body)
    assert decision["pipeline"] == pipeline
    asked = [h["host"] for h in body["hosts"]]
    assert hosts and set(hosts) <= set(asked) and len(hosts) == len(set(hosts))
    removed = {h for s in decision["steps"] if not s.get("shadow") for h in s.get("removed", {})}
    assert not removed & set(hosts)
    assert set(hosts) == set(asked) - removed   # the demo fleet knows every host offered
    final = decision["final_weights"]
    assert [final[h] for h in hosts] == sorted((final[h] for h in hosts), reverse=True)
    assert all(math.isfinite(w) for w in final.values())
    assert {s["name"] for s in decision["steps"]} == {
        s.name for s in SHIPPED[pipeline].filters + SHIPPED[pipeline].weighers}


@pytest.mark.parametrize("pipeline", [n for n, p in SHIPPED.items() if p.service == "nova"])
def test_requested_destination_keeps_the_two_aggregates(client, app, pipeline):
    hosts, decision = decide(client, app, "nova",
                             fixture("nova", "requested-destination-aggregates", pipeline))
    assert set(hosts) == {"cmp0000", "cmp0001", "cmp0002", "cmp0003"}
    assert {"cmp0004", "cmp0007"} <= set(removed_by(decision, "filter_requested_destination"))


@pytest.mark.parametrize("pipeline", [n for n, p in SHIPPED.items() if p.service == "nova"])
def test_anti_affinity_drops_the_host_of_the_groups_member(client, app, pipeline):
    hosts, decision = decide(client, app, "nova",
                             fixture("nova", "multi-create-anti-affinity", pipeline))
    assert "cmp0005" not in hosts
    assert "max_server_per_host 1" in removed_by(
        decision, "filter_server_group_anti_affinity")["cmp0005"]


def test_anti_affinity_honours_max_server_per_host(client, app):
    body = fixture("nova", "multi-create-anti-affinity")
    group = body["spec"]["nova_object.data"]["instance_group"]["nova_object.data"]
    group["_rules"] = {"max_server_per_host": "2"}
    group["hosts"] = ["cmp0004"]
    _, decision = decide(client, app, "nova", body)
    assert "filter_server_group_anti_affinity" not in {
        s["name"] for s in decision["steps"] if s.get("removed")}


def test_live_migration_keeps_compatible_targets_near_the_source(client, app):
    hosts, decision = decide(client, app, "nova", fixture("nova", "cpu-live-migrate"))
    assert decision["pipeline"] == "kvm-general-purpose-load-balancing"
    assert set(hosts) == {"cmp0000", "cmp0001", "cmp0002"}
    removed = removed_by(decision, "filter_live_migration")
    assert removed["cmp0003"] == "host is the live migration's source"
    assert removed["cmp0004"].startswith("lacks the source's CPU feature(s)")
    # cmp0002 shares an aggregate with the source cmp0003 and passes cmp0001 on that
    locality = next(s for s in decision["steps"]
                    if s["name"] == "weigher_live_migration_locality")["raw"]
    assert locality == {"cmp0000": 0.0, "cmp0001": 0.0, "cmp0002": 0.5}
    assert hosts.index("cmp0002") < hosts.index("cmp0001")


def test_general_purpose_spreads_to_quiet_hosts_and_avoids_failing_ones(client, app):
    hosts, decision = decide(client, app, "nova",
                             fixture("nova", "cpu-general-purpose", neutral=True))
    assert decision["pipeline"] == "kvm-general-purpose-load-balancing"
    assert hosts[0] == "cmp0000"                 # idle, no steal, quiet project
    assert hosts[-1] == "cmp0004"                # two recent build failures
    assert hosts.index("cmp0002") < hosts.index("cmp0007")   # cmp0007 busy and nearly full
    assert hosts.index("cmp0000") < hosts.index("cmp0001")   # gpu-team is noisy on cmp0001


def test_hana_bin_packing_fills_the_fullest_smallest_host(client, app):
    hosts, _ = decide(client, app, "nova",
                      fixture("nova", "cpu-general-purpose", "kvm-hana-bin-packing", True))
    assert hosts[0] == "cmp0007"                 # nearly full, and the smallest host


def test_gpu_bin_packing_fills_the_busier_gpu_host(client, app):
    # 1 H100 each: both HGX hosts hold one (gpu-2xh100-pinned's 1 GiB pages leave only
    # cmp0001 since the topology filters), and cmp0001 is the busier one
    hosts, _ = decide(client, app, "nova",
                      fixture("nova", "multi-create-anti-affinity", neutral=True))
    assert hosts == ["cmp0001", "cmp0000"]


def test_gpu_topology_aware_keeps_the_free_hgx_hosts_whole(client, app):
    # 1 H100, NUMA guest: cmp0000 and cmp0009 are free HGX hosts, cmp0001 has node 0's four
    # GPUs in use and cmp0011 two of them; breaking a free host costs the most usefulness
    body = fixture("nova", "gpu-1xa100-numa", neutral=True)
    hosts = ["cmp0000", "cmp0001", "cmp0009", "cmp0011"]
    body["hosts"] = [{"host": h, "hypervisor_hostname": f"{h}.cloud.example"} for h in hosts]
    body["weights"] = dict.fromkeys(hosts, 0.0)
    request = body["spec"]["nova_object.data"]["pci_requests"]["nova_object.data"]["requests"][0]
    request["nova_object.data"]["spec"] = [{"vendor_id": "10de", "product_id": "2330"}]
    answer, decision = decide(client, app, "nova", body)
    assert decision["pipeline"] == "kvm-gpu-topology-aware"
    raw = {s["name"]: s.get("raw") for s in decision["steps"] if s["kind"] == "weigher"}
    fragmentation = raw["weigher_gpu_fragmentation"]
    assert fragmentation["cmp0000"] == fragmentation["cmp0009"] < fragmentation["cmp0001"]
    assert raw["weigher_gpu_affinity"] == dict.fromkeys(hosts, 1.0)    # its cell holds the GPU
    assert set(answer[:2]) == {"cmp0001", "cmp0011"}


def test_vmware_hana_stacks_onto_the_fuller_cluster(client, app):
    hosts, decision = decide(client, app, "nova", fixture("nova", "vmware-hana", neutral=True))
    assert decision["pipeline"] == "vmware-hana-bin-packing"
    ram = next(s for s in decision["steps"] if s["name"] == "weigher_ram")["raw"]
    assert hosts == sorted(ram, key=ram.get)     # least free memory first


def test_vmware_general_purpose_avoids_the_contended_cluster(client, app):
    body = fixture("nova", "vmware-hana", neutral=True)
    flavor = body["spec"]["nova_object.data"]["flavor"]["nova_object.data"]
    flavor.update(name="gp_c8_m32", vcpus=8, memory_mb=32768,
                  extra_specs={"capabilities:hypervisor_type": "VMware vCenter Server"})
    hosts, decision = decide(client, app, "nova", body)
    assert decision["pipeline"] == "vmware-general-purpose-load-balancing"
    assert {"nova-compute-bb0003", "nova-compute-bb0004"} <= set(hosts)
    assert hosts.index("nova-compute-bb0004") < hosts.index("nova-compute-bb0003")
    contention = next(s for s in decision["steps"] if s["name"] == "weigher_contention")["raw"]
    assert contention["nova-compute-bb0003"] == -1.0


def test_cinder_prefers_free_quiet_pools(client, app):
    hosts, decision = decide(client, app, "cinder",
                             fixture("cinder", "create-volume-default-type", neutral=True))
    assert decision["pipeline"] == "cinder-external-scheduler"
    # netapp-c#aggr_ssd_1 has nearly as much free (virtual) share as netapp-b#aggr1, but
    # 0.34x of its capacity allocated and 45 volumes against 1.4x and 380
    assert hosts[:2] == ["cinder-volume-3@netapp-c#aggr_ssd_1", "cinder-volume-2@netapp-b#aggr1"]
    # the two nearly full, over 95% utilised pools come last
    assert set(hosts[-2:]) == {"cinder-volume-1@netapp-a#aggr2",
                               "cinder-volume-3@netapp-c#aggr_ssd_2"}


def test_cinder_capabilities_keep_the_types_backend(client, app):
    body = fixture("cinder", "create-volume-from-image")
    body["hosts"] = [{"host": h} for h in ("cinder-volume-1@netapp-a#aggr1",
                                           "cinder-volume-3@netapp-c#aggr_ssd_1")]
    body["weights"] = {"cinder-volume-1@netapp-a#aggr1": 1.0,
                       "cinder-volume-3@netapp-c#aggr_ssd_1": 0.0}
    hosts, decision = decide(client, app, "cinder", body)
    assert hosts == ["cinder-volume-3@netapp-c#aggr_ssd_1"]
    assert "volume_backend_name=netapp-hdd" in removed_by(
        decision, "filter_pool_capabilities")["cinder-volume-1@netapp-a#aggr1"]


def test_manila_balances_storage_node_cpu(client, app):
    hosts, decision = decide(client, app, "manila",
                             fixture("manila", "create-share-nfs", neutral=True))
    assert decision["pipeline"] == "manila-external-scheduler"
    assert hosts[0] == "manila-share-3@netapp#aggr_ssd_1"     # most free, idle node
    assert set(hosts[-2:]) == {"manila-share-1@netapp#aggr_ssd_1",
                               "manila-share-1@netapp#aggr_ssd_2"}  # busy node


def test_manila_requested_zone_id_is_honoured(client, app):
    """The bundled body names eu-de-1a by id only: a pool of eu-de-1b is removed by it.

    The demo fleet's pools carry their zones' ids; manila-share-3 is in eu-de-1b. Added to
    the candidates as the caller's best, it is the one removed and the rest are answered.
    """
    body = fixture("manila", "create-share-cifs-az")
    other = "manila-share-3@netapp#aggr_ssd_1"
    asked = [h["host"] for h in body["hosts"]]
    body["hosts"].insert(0, {"host": other})
    body["weights"][other] = 2.0
    hosts, decision = decide(client, app, "manila", body)
    assert other not in hosts and sorted(hosts) == sorted(asked)
    assert removed_by(decision, "filter_correct_az") == {other: (
        "availability zone id 627bf322-5fac-4cb6-a34a-cb115ee347dd (eu-de-1b) is not the "
        "requested 9ed89edd-d684-4325-b600-e6129ec04ece")}


def test_manila_share_type_capabilities_are_checked(client, app):
    body = fixture("manila", "create-share-nfs")
    body["spec"]["share_type"]["extra_specs"]["mount_snapshot_support"] = "<is> True"
    hosts, decision = decide(client, app, "manila", body)
    assert hosts == []                           # no demo pool mounts snapshots
    assert len(removed_by(decision, "filter_pool_capabilities")) == 6
