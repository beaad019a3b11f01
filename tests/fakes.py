"""Table-friendly builders of knowledge views and requests for plugin and pipeline tests."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from types import MappingProxyType

from cortex.knowledge.view import (
    Aggregate,
    HostState,
    InstanceSummary,
    Inventory,
    KnowledgeView,
    MigrationSummary,
    NodeState,
    StoragePoolState,
)
from cortex.request import CinderRequest, ManilaRequest, NovaRequest
from tests.conftest import FIXTURES, load_body


def inventory(total, used=0, reserved=0, ratio=1.0, max_unit=None, min_unit=1, step=1):
    """An Inventory with Placement defaults (max_unit = total)."""
    return Inventory(total=total, reserved=reserved, min_unit=min_unit,
                     max_unit=total if max_unit is None else max_unit, step_size=step,
                     allocation_ratio=ratio, used=used)


def host(name, az="az-1", enabled=True, up=True, traits=(), inventories=None, nodes=None,
         aggregates=(), disabled_reason=None, hypervisor_type="QEMU", hypervisor_version=8002000,
         cpu_arch="x86_64", features=None, cpu_features=(), instances=(), migrations=(),
         failed_builds=0, allowed_projects=(), cpu_info=None, host_ip=None,
         supported_instances=None):
    """A HostState with one node named ``<name>.cloud.example`` unless ``nodes`` given.

    ``cpu_info``, ``host_ip``, ``supported_instances``: each node's hypervisor facts.
    """
    inventories = inventories if inventories is not None else {
        "VCPU": inventory(64, ratio=4.0), "MEMORY_MB": inventory(262144),
        "DISK_GB": inventory(2000)}
    nodes = nodes or {f"{name}.cloud.example": inventories}
    node_states = {n: NodeState(n, f"uuid-{n}", hypervisor_type, hypervisor_version, cpu_arch,
                                frozenset(traits), MappingProxyType(inv),
                                dict(cpu_info or {}), host_ip,
                                None if supported_instances is None
                                else tuple(map(tuple, supported_instances)))
                   for n, inv in nodes.items()}
    return HostState(name, az, enabled, up, disabled_reason, tuple(aggregates),
                     MappingProxyType(node_states), frozenset(traits),
                     features=MappingProxyType(dict(features or {})),
                     cpu_features=frozenset(cpu_features), instances=tuple(instances),
                     migrations=tuple(migrations), failed_builds=failed_builds,
                     allowed_projects=frozenset(allowed_projects))


def instance(uuid, project=None, vm_state="active", task_state=None, busy=0.0):
    """An InstanceSummary."""
    return InstanceSummary(uuid, project, vm_state, task_state, busy)


def migration(uuid="m1", source="src", dest="dst", status="running", **resources):
    """A MigrationSummary claiming ``resources`` (e.g. ``VCPU=4``)."""
    return MigrationSummary(uuid, f"inst-{uuid}", source, dest, status,
                            MappingProxyType(resources))


def aggregate(uuid, name="agg", az=None, **metadata):
    """An Aggregate."""
    return Aggregate(uuid, name, az, MappingProxyType(metadata))


def pool(name, az="eu-de-1a", total=1000.0, free=500.0, provisioned=0.0, reserved=0.0,
         ratio=1.0, thin=False, thick=True, capabilities=None, features=None, count=0,
         allocated=None, az_id=None):
    """A StoragePoolState (allocated defaults to ``total - free``; ``az_id``: the zone's id)."""
    return StoragePoolState(name, az, total, free,
                            total - free if allocated is None else allocated, provisioned,
                            reserved, ratio, thin, thick,
                            MappingProxyType(dict(capabilities or {})),
                            MappingProxyType(dict(features or {})), count, az_id)


class ViewCache:
    """A KnowledgeCache stand-in: one view, read a second ago."""

    def __init__(self, current):
        self.current = current

    def view(self):
        return self.current

    def age(self):
        return 1.0


def view(*hosts, pools=(), service="cinder", version=1):
    """A KnowledgeView of the given hosts and (one service's) pools."""
    pools_by_service = {service: MappingProxyType({p.name: p for p in pools})} if pools else {}
    return KnowledgeView(version, datetime.now(UTC), MappingProxyType({h.host: h for h in hosts}),
                         MappingProxyType(pools_by_service))


def nova_body(fixture="cpu-general-purpose", hosts=None, weights=None, flavor=None,
              spec=None, **top):
    """A bundled Nova body with the candidate hosts, flavor fields or spec fields replaced."""
    body = copy.deepcopy(load_body(FIXTURES / "nova" / f"{fixture}.json"))
    if hosts is not None:
        body["hosts"] = [{"host": h, "hypervisor_hostname": f"{h}.cloud.example"} for h in hosts]
        body["weights"] = weights or {h: 0.0 for h in hosts}
    elif weights is not None:
        body["weights"] = weights
    data = body["spec"]["nova_object.data"]
    data["flavor"]["nova_object.data"].update(flavor or {})
    data.update(spec or {})
    body.update(top)
    return body


def nova(fixture="cpu-general-purpose", devices=None, **kwargs) -> NovaRequest:
    """A parsed NovaRequest, see nova_body for the arguments; ``devices``: a DeviceCatalog."""
    return NovaRequest.from_body(nova_body(fixture, **kwargs), devices=devices)


def storage(service, fixture, hosts=None, **props) -> CinderRequest | ManilaRequest:
    """A parsed Cinder/Manila request from a bundled body, hosts and properties replaced."""
    body = copy.deepcopy(load_body(FIXTURES / service / f"{fixture}.json"))
    if hosts is not None:
        body["hosts"] = [{"host": h} for h in hosts]
        body["weights"] = {h: 0.0 for h in hosts}
    key = "volume_properties" if service == "cinder" else "share_properties"
    body["spec"].setdefault(key, {}).update(props)
    parser = CinderRequest if service == "cinder" else ManilaRequest
    return parser.from_body(body)


def promise(store, host, now, check):
    """Reserve ``check(host's reservations)`` under the host's lock (None: refused)."""
    with store.lock_host(host, now) as held:
        made = check(held.reservations)
        if made is not None:
            held.reserve(made)
    return made
