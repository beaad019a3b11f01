"""check_all/weigh_all of every plugin say exactly what check/weigh say host by host.

The batch methods judge all candidates at once from facts kept in the knowledge view;
this compares them with the per-host contract on a varied fleet (several nodes,
migrations, odd inventory units, aggregates, traits, load) and varied requests, cold
(nothing known yet) and warm (facts of an earlier request reused).
"""

import random

import pytest

from cortex import conf
from cortex.pipeline.config import load_pipelines
from cortex.plugins.registry import FILTERS, WEIGHERS, load_all
from cortex.request import NovaRequest
from tests.fakes import (
    aggregate,
    host,
    instance,
    inventory,
    migration,
    nova,
    nova_body,
    pool,
    storage,
    view,
)

load_all()
SEED = 20240508


def _inventories(rng):
    cpu = rng.choice(["VCPU", "VCPU", "PCPU"])
    inventories = {cpu: inventory(rng.choice([16, 64, 96]), used=rng.randrange(0, 200),
                                  ratio=rng.choice([1.0, 1.3, 4.0, 16.0]),
                                  min_unit=rng.choice([1, 1, 2]), step=rng.choice([1, 1, 4]),
                                  max_unit=rng.choice([None, None, 8]))}
    if rng.random() < 0.9:
        inventories["MEMORY_MB"] = inventory(rng.choice([65536, 262144]),
                                             used=rng.randrange(0, 300000),
                                             reserved=rng.choice([0, 4096]))
    if rng.random() < 0.8:
        inventories["DISK_GB"] = inventory(rng.choice([0, 500, 2000]), used=rng.randrange(0, 600))
    return inventories


def _host(rng, i):
    name = f"cmp{i:03d}"
    aggregates = []
    if rng.random() < 0.2:
        aggregates.append(aggregate("a-tenant", filter_tenant_id=rng.choice(
            ["p1", "p1,p2", "other", ""])))
    if rng.random() < 0.2:
        aggregates.append(aggregate("a-allowed", allowed_projects=rng.choice(["p2", "p1, p3"])))
    if rng.random() < 0.3:
        aggregates.append(aggregate("a-zone", az="az-2", hana=rng.choice(["true", "false"])))
    nodes = None
    if rng.random() < 0.1:
        nodes = {f"{name}-a": _inventories(rng), f"{name}-b": _inventories(rng)}
    migrations = ()
    if rng.random() < 0.15:
        migrations = (migration(f"m{i}", status=rng.choice(["running", "completed"]),
                                VCPU=4, MEMORY_MB=8192),)
    instances = tuple(instance(f"i{i}-{k}", project=rng.choice(["p1", "p2"]),
                               task_state=rng.choice([None, "rebuilding"]),
                               busy=rng.random()) for k in range(rng.randrange(0, 4)))
    return host(
        name, az=rng.choice(["az-1", "az-1", "az-2", None]), enabled=rng.random() > 0.1,
        up=rng.random() > 0.1, disabled_reason=rng.choice([None, "maintenance"]),
        traits=rng.sample(["COMPUTE_STATUS_DISABLED", "CUSTOM_X", "CUSTOM_Y",
                           "HW_CPU_X86_AVX2"], rng.randrange(0, 3)),
        inventories=_inventories(rng), nodes=nodes, aggregates=aggregates,
        hypervisor_type=rng.choice(["QEMU", "qemu", "ch", "VMware vCenter Server", None]),
        hypervisor_version=rng.choice([8002000, 9001000, None]),
        cpu_arch=rng.choice(["x86_64", "aarch64", None]),
        features={k: rng.random() for k in ("cpu.busy", "cpu.steal") if rng.random() < 0.7},
        cpu_features=rng.sample(["avx2", "sse4_2", "vmx"], rng.randrange(0, 3)),
        instances=instances, migrations=migrations, failed_builds=rng.randrange(0, 3),
        allowed_projects=rng.choice([(), (), ("p1",)]))


FLEET = [_host(random.Random(SEED + i), i) for i in range(80)]
HOSTS = [h.host for h in FLEET]

REQUESTS = {
    "plain": {},
    "capabilities": {"flavor": {"extra_specs": {
        "capabilities:hypervisor_type": "qemu", "capabilities:cpu_info:arch": "x86_64",
        "capabilities:vcpus_total": ">= 60", "free_ram_mb": ">= 1000",
        "hana": "true"}}},
    "cpu-features": {"flavor": {"extra_specs": {
        "capabilities:cpu_info:features": "<all-in> avx2 vmx",
        "hypervisor_version": "<or> 8002000 <or> 9001000"}}},
    "dedicated": {"flavor": {"vcpus": 8, "memory_mb": 70000, "root_gb": 1000,
                             "extra_specs": {"hw:cpu_policy": "dedicated",
                                             "trait:CUSTOM_X": "required",
                                             "trait:CUSTOM_Y": "forbidden"}}},
    "odd-units": {"flavor": {"vcpus": 3, "memory_mb": 1024, "root_gb": 0}},
    "other-project": {"spec": {"project_id": "p2", "availability_zone": "az-2"}},
}


def _image(request_body, properties):
    image = request_body["spec"]["nova_object.data"]["image"]["nova_object.data"]
    image["properties"]["nova_object.data"] = properties


def _requests():
    for name, kwargs in REQUESTS.items():
        yield name, nova(hosts=HOSTS, **kwargs)
    body = nova_body(hosts=HOSTS)
    _image(body, {"hw_architecture": "x86_64", "img_hv_type": "qemu",
                  "img_hv_requested_version": ">=8.0, <9"})
    yield "image", NovaRequest.from_body(body)


REQUEST_LIST = list(_requests())
# Every Nova plugin with its default options, and every step of the shipped Nova
# pipelines with the options configured there.
NOVA_PLUGINS = sorted(
    [(n, c()) for table in (FILTERS, WEIGHERS) for n, c in table.items()
     if "nova" in c.services and c.__module__.startswith("cortex.plugins.")]
    + [(f"{p.name}/{s.name}", s.plugin)
       for p in load_pipelines(conf.shipped_file("pipelines.yaml")).pipelines.values()
       if p.service == "nova" for s in p.filters + p.weighers], key=lambda np: np[0])


def _per_host(plugin, pairs, request):
    if plugin.name.startswith("filter_"):
        return {c.host: r for c, s in pairs
                    if (r := plugin.check(s, request, c)) is not None}
    return [repr(float(plugin.weigh(s, request, c))) for c, s in pairs]


def _batch(plugin, pairs, request, knowledge):
    if plugin.name.startswith("filter_"):
        return plugin.check_all(pairs, request, knowledge)
    return [repr(w) for w in plugin.weigh_all(pairs, request, knowledge)]


@pytest.mark.parametrize("name, configured", NOVA_PLUGINS, ids=[n for n, _ in NOVA_PLUGINS])
def test_batch_agrees_with_per_host(name, configured):
    knowledge = view(*FLEET)
    compared = 0
    for _round in range(2):  # cold, then warm: facts kept in the view are reused
        for _label, request in REQUEST_LIST:
            if not configured.applies(request):
                continue
            plugin = configured.bind(request, knowledge)
            pairs = [(c, knowledge.hosts[c.host]) for c in request.candidates]
            expected = _per_host(plugin, pairs, request)
            assert _batch(plugin, pairs, request, knowledge) == expected
            # a subset, as after earlier filters removed hosts
            subset = pairs[::3]
            assert _batch(plugin, subset, request, knowledge) == _per_host(
                plugin, subset, request)
            compared += 1
    assert compared or name.split("/")[-1] in UNUSED_BY_THESE_REQUESTS


# GPU, topology and request-specific plugins whose applies() none of these requests meet.
UNUSED_BY_THESE_REQUESTS = {
    "filter_gpu_capacity", "filter_gpu_health", "filter_numa_topology",
    "filter_pci_numa_affinity", "filter_host_instructions", "filter_requested_destination",
    "filter_excluded_hosts", "filter_server_group_affinity",
    "filter_server_group_anti_affinity", "filter_external_customer", "filter_live_migration",
    "weigher_gpu_affinity", "weigher_gpu_fragmentation", "weigher_gpu_cell_preserving",
    "weigher_numa_locality",
    "weigher_gpu_load", "weigher_gpu_energy", "weigher_gpu_model_reserve",
    "weigher_live_migration_locality",
    "weigher_server_group_soft_affinity", "weigher_server_group_soft_anti_affinity",
    "filter_network_domain", "weigher_network_domain",  # groups only
    "filter_failover_room",  # off with its default options (hosts: 0)
    "filter_isolated_hosts",  # off with its default options (nothing isolated)
    "weigher_metrics",  # with default options (no metrics) only
}


def test_the_fleet_exercises_the_batch_paths():
    """The fleet holds every case the fast paths set aside (else the test proves little)."""
    request = nova(hosts=HOSTS, **REQUESTS["plain"])
    knowledge = view(*FLEET)
    plugin = FILTERS["filter_has_enough_capacity"]().bind(request, knowledge)
    pairs = [(c, knowledge.hosts[c.host]) for c in request.candidates]
    removed = plugin.check_all(pairs, request, knowledge)
    assert 0 < len(removed) < len(FLEET)
    assert any(len(h.all_nodes) > 1 for h in FLEET)
    assert any(h.migrations for h in FLEET)


def test_host_only_answers_are_kept_per_service():
    """A pool and a host of the same name never share a host-only plugin's answer."""
    pools = [pool("cmp000", capabilities={}, features={"pool.utilization": 0.95}, count=30),
             pool("cmp001", features={"pool.utilization": 0.1}, count=2)]
    knowledge = view(*FLEET[:2], pools=pools, service="cinder")
    request = storage("cinder", "create-volume-thin-qos", hosts=["cmp000", "cmp001"])
    for name in ("weigher_volume_count", "weigher_pool_utilization",
                 "weigher_pool_allocated_capacity"):
        plugin = WEIGHERS[name]()
        pairs = [(c, knowledge.pools["cinder"][c.host]) for c in request.candidates]
        for _ in range(2):
            assert plugin.weigh_all(pairs, request, knowledge) == [
                float(plugin.weigh(s, request, c)) for c, s in pairs]


def test_commitment_weigher_batch_with_room_held():
    """weigher_commitment's batch path where the project holds room on some hosts."""
    from cortex.plugins.weighers.commitment import CommitmentWeigher

    knowledge = view(*FLEET)
    request = REQUEST_LIST[0][1]
    plugin = CommitmentWeigher(room={HOSTS[1]: 2, HOSTS[5]: 1, HOSTS[6]: 0})
    pairs = [(c, knowledge.hosts[c.host]) for c in request.candidates]
    assert _batch(plugin, pairs, request, knowledge) == _per_host(plugin, pairs, request)
    assert sum(plugin.weigh_all(pairs, request, knowledge)) == 2.0
