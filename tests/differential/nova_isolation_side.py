"""The Nova side of the isolation differential: Nova's aggregate, isolation and server-group
filters on Nova's own ``HostState``.

Runs only inside the Nova virtualenv (:mod:`tests.differential.nova_venv`); imports nothing
of Cortex. ``python nova_isolation_side.py --seed S --requests R --hosts H --candidates C``
writes JSON lines to stdout:

* ``{"kind": "config", "isolated_hosts": [...], "isolated_images": [...],
  "restrict": bool}``: Nova's ``[filter_scheduler]`` options the judging ran under;
* ``{"kind": "host", "fleet": fleet host}`` per host and ``{"kind": "aggregates",
  "aggregates": [fleet aggregate]}``: the drawn hosts (with the instances on them) and
  aggregates (with metadata and members) as a Cortex fleet file holds them;
* ``{"kind": "request", "id", "project", "image", "group", "intent", "body",
  "nova": {host: bool}, "why": {host: {filter: bool}}}``: every pair judged by
  AggregateMultiTenancyIsolation, AggregateImagePropertiesIsolation,
  IsolatedHostsFilter, ServerGroupAffinityFilter, ServerGroupAntiAffinityFilter and
  AggregateInstanceExtraSpecsFilter through ``BaseHostFilter._filter_one``
  (``RUN_ON_REBUILD`` holds); ``"raises"`` where a filter raised ``ValueError`` (a
  numeric operator on metadata that is no number: Nova fails the whole request).

A group's ``hosts`` are its members' hosts, as the conductor fills them.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import uuid

from nova import objects

objects.register_all()

from nova.conf import CONF  # noqa: E402
from nova.scheduler import host_manager  # noqa: E402
from nova.scheduler.filters import (  # noqa: E402
    affinity_filter,
    aggregate_image_properties_isolation,
    aggregate_instance_extra_specs,
    aggregate_multitenancy_isolation,
    isolated_hosts_filter,
)
from nova_side import body_of, build_spec, configure  # noqa: E402

FILTERS = {
    "filter_aggregate_multitenancy_isolation":
        aggregate_multitenancy_isolation.AggregateMultiTenancyIsolation,
    "filter_aggregate_image_properties_isolation":
        aggregate_image_properties_isolation.AggregateImagePropertiesIsolation,
    "filter_isolated_hosts": isolated_hosts_filter.IsolatedHostsFilter,
    "filter_server_group_affinity": affinity_filter.ServerGroupAffinityFilter,
    "filter_server_group_anti_affinity": affinity_filter.ServerGroupAntiAffinityFilter,
    "filter_aggregate_instance_extra_specs":
        aggregate_instance_extra_specs.AggregateInstanceExtraSpecsFilter,
}
#: Flavor extra specs AggregateInstanceExtraSpecsFilter reads (scoped and unscoped); a
#: numeric operator on a value that is no number makes Nova raise.
SPECS = (("aggregate_instance_extra_specs:ssd", ("true", "false", "<in> tru", "s== true")),
         ("aggregate_instance_extra_specs:os_distro", ("<or> rhel <or> ubuntu", "sles")),
         ("aggregate_instance_extra_specs:cores", (">= 8", "== 16", "<= 4", "16")),
         ("aggregate_instance_extra_specs:filter_tenant_id", ("<in> pa", "<all-in> pa pb")),
         ("ssd", ("true",)), ("hw:cpu_policy", ("shared",)),
         ("aggregate_instance_extra_specs:ssd#raises", (">= 1",)))
METADATA = ({"filter_tenant_id": "pa"}, {"filter_tenant_id": "pa, pb", "filter_tenant_id2": "pc"},
            {"filter_tenant_id": ""}, {"hw_architecture": "x86_64"},
            {"hw_architecture": "aarch64,x86_64", "os_distro": "ubuntu"},
            {"os_distro": "rhel", "ssd": "true"}, {"hw_vm_mode": "hvm"}, {},
            {"img_hv_type": "kvm"}, {"isolate.hw_architecture": "x86_64"},
            {"hw_maxphysaddr_bits": "40"}, {"os_secure_boot": "required"},
            {"cores": "16", "ssd": "false"}, {"cores": "4,32"})
IMAGES = [str(uuid.UUID(int=1000 + i)) for i in range(4)]
PROPS = {"hw_architecture": ("x86_64", "aarch64"), "os_distro": ("ubuntu", "rhel", "sles"),
         "hw_vm_mode": ("hvm", "xen"), "img_hv_type": ("kvm", "qemu"),
         "hw_maxphysaddr_bits": (40, 48), "os_secure_boot": ("required", "disabled")}


def make_fleet(rng: random.Random, hosts: int) -> tuple[list[dict], list[dict]]:
    """``(fleet hosts, fleet aggregates)``: hosts with 0..3 instances, 0..2 aggregates each."""
    fleet, members = [], {i: [] for i in range(len(METADATA))}
    for index in range(hosts):
        name = f"i{index:03d}"
        instances = [{"uuid": str(uuid.UUID(int=10000 + index * 10 + k))}
                     for k in range(rng.choice((0, 0, 1, 2, 3)))]
        fleet.append({"host": name, "uuid": str(uuid.UUID(int=index + 1)),
                      "hypervisor_type": "QEMU", "instances": instances,
                      "inventories": {"VCPU": {"total": 64}, "MEMORY_MB": {"total": 262144}}})
        for chosen in rng.sample(range(len(METADATA)), rng.choice((0, 1, 1, 2))):
            members[chosen].append(name)
    aggregates = [{"name": f"agg{i}", "uuid": str(uuid.UUID(int=500 + i)),
                   "metadata": METADATA[i], "hosts": members[i]} for i in range(len(METADATA))]
    return fleet, aggregates


def host_state(host: dict, aggregates: list[dict]) -> host_manager.HostState:
    """Nova's HostState with the host's aggregates and instances."""
    state = host_manager.HostState(host["host"], host["host"], uuid.uuid4().hex)
    state.aggregates = [objects.Aggregate(id=i, uuid=a["uuid"], name=a["name"],
                                          metadata=dict(a["metadata"]))
                        for i, a in enumerate(aggregates) if host["host"] in a["hosts"]]
    state.instances = {i["uuid"]: None for i in host["instances"]}
    return state


def make_group(rng: random.Random, fleet: list[dict]) -> dict | None:
    """A server group of members drawn from the fleet's instances, or None."""
    kind = rng.choice((None, None, "affinity", "anti-affinity", "anti-affinity"))
    if kind is None:
        return None
    placed = [(h["host"], i["uuid"]) for h in fleet for i in h["instances"]]
    chosen = rng.sample(placed, min(len(placed), rng.choice((0, 1, 2, 4))))
    rules = {"max_server_per_host": rng.choice((1, 2))} if kind == "anti-affinity" and (
        rng.random() < 0.5) else {}
    return {"uuid": str(uuid.UUID(int=rng.getrandbits(64))), "policy": kind, "rules": rules,
            "members": [m for _, m in chosen], "hosts": sorted({h for h, _ in chosen})}


def generate(seed: int, requests: int, hosts: int, candidates: int, out) -> None:
    """Write the configuration, hosts and aggregates, then each judged request."""
    configure()
    rng = random.Random(seed)
    fleet, aggregates = make_fleet(rng, hosts)
    isolated_hosts = sorted(h["host"] for h in rng.sample(fleet, max(1, hosts // 8)))
    config = {"isolated_hosts": isolated_hosts, "isolated_images": IMAGES[:2],
              "restrict": rng.random() < 0.5}
    CONF.set_override("isolated_hosts", config["isolated_hosts"], group="filter_scheduler")
    CONF.set_override("isolated_images", config["isolated_images"], group="filter_scheduler")
    CONF.set_override("restrict_isolated_hosts_to_isolated_images", config["restrict"],
                      group="filter_scheduler")
    out.write(json.dumps({"kind": "config", **config}) + "\n")
    for host in fleet:
        out.write(json.dumps({"kind": "host", "fleet": host}) + "\n")
    out.write(json.dumps({"kind": "aggregates", "aggregates": aggregates}) + "\n")
    states = {h["host"]: host_state(h, aggregates) for h in fleet}
    for made in range(requests):
        project = rng.choice(("pa", "pb", "pc", "pd", "p"))
        image = {k: rng.choice(v) for k, v in PROPS.items() if rng.random() < 0.3}
        intent = "rebuild" if rng.random() < 0.1 else "create"
        specs = {}
        for key, values in rng.sample(SPECS, rng.choice((0, 0, 0, 1, 2))):
            specs[key.split("#")[0]] = rng.choice(values)
        spec = build_spec(specs, image, {"vcpus": 1, "memory_mb": 512, "intent": intent,
                                         "id": made})
        spec.project_id = project
        spec.image.id = rng.choice(IMAGES[:2] if rng.random() < 0.2 else IMAGES[2:])
        group = make_group(rng, fleet)
        spec.instance_group = objects.InstanceGroup(**group, policies=[group["policy"]]
                                                    ) if group else None
        chosen = [h["host"] for h in rng.sample(fleet, min(candidates, hosts))]
        if intent == "rebuild":
            chosen = chosen[:1]
            spec.force_hosts, spec.force_nodes = chosen, chosen
        why = {n: {name: _verdict(cls, states[n], spec) for name, cls in FILTERS.items()}
               for n in chosen}
        out.write(json.dumps({
            "kind": "request", "id": made, "project": project, "image": image,
            "image_id": spec.image.id, "group": group, "intent": intent, "specs": specs,
            "body": body_of(spec, intent, chosen),
            "nova": {n: "raises" if "raises" in w.values() else all(w.values())
                     for n, w in why.items()}, "why": why}) + "\n")


def _verdict(cls, state, spec) -> bool | str:
    """One filter through ``_filter_one``; ``"raises"`` where Nova raises instead."""
    try:
        return bool(cls()._filter_one(state, spec))
    except ValueError:
        return "raises"


def main() -> None:
    """Command line: ``--seed --requests --hosts --candidates``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--hosts", type=int, default=80)
    parser.add_argument("--candidates", type=int, default=40)
    args = parser.parse_args()
    generate(args.seed, args.requests, args.hosts, args.candidates, sys.stdout)


if __name__ == "__main__":
    main()
