"""A small GPU cloud built through Placement's API and the fake Nova, for the sync tests.

cmp0000 and cmp0001: HGX H100 hosts as in the demo fleet (VCPU 16 x2.0, PCPU 200,
2 TiB RAM with 64 GiB reserved, 3576 GiB disk), each H100 a PCI child provider
``<node>_0000:<bus>:00.0`` with one CUSTOM_PCI_10DE_2330. cmp0003: an A100 MIG host
whose four GPUs are vGPU child providers ``<node>_pci_0000_<bus>_00_0`` with VGPU 2.
cmp0002: a general-purpose host whose service is disabled. All in az-1.
"""

from __future__ import annotations

import uuid as uuidlib

from tests.fake_openstack import FakeCloud

H100_BUSES = ("1b", "43", "52", "61", "9d", "c3", "d1", "df")
A100_BUSES = ("17", "31", "b1", "ca")
AGGREGATE = "11111111-2222-3333-4444-555555555555"


def node(host: str) -> str:
    return f"{host}.cloud.example"


def root_uuid(host: str) -> str:
    return str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, node(host)))


def hgx_host(placement, host: str) -> str:
    root = placement.provider(node(host), uuid=root_uuid(host))
    placement.inventories(root, {
        "VCPU": {"total": 16, "max_unit": 16, "allocation_ratio": 2.0},
        "PCPU": {"total": 200, "max_unit": 200},
        "MEMORY_MB": {"total": 2097152, "max_unit": 2097152, "reserved": 65536},
        "DISK_GB": {"total": 3576, "max_unit": 3576}})
    placement.traits(root, ["COMPUTE_NODE", "HW_ARCH_X86_64", "HW_CPU_X86_AVX512F"])
    placement.aggregates(root, [AGGREGATE])
    for bus in H100_BUSES:
        child = placement.provider(f"{node(host)}_0000:{bus}:00.0", parent=root)
        placement.inventories(child, {"CUSTOM_PCI_10DE_2330": {"total": 1, "max_unit": 1}})
        placement.traits(child, ["CUSTOM_NVIDIA_H100_SXM5"])
    return root


def mig_host(placement, host: str) -> str:
    root = placement.provider(node(host), uuid=root_uuid(host))
    placement.inventories(root, {
        "VCPU": {"total": 128, "max_unit": 128, "reserved": 8, "allocation_ratio": 2.0},
        "MEMORY_MB": {"total": 1048576, "max_unit": 1048576, "reserved": 32768},
        "DISK_GB": {"total": 1788, "max_unit": 1788}})
    placement.traits(root, ["COMPUTE_NODE"])
    for bus in A100_BUSES:
        child = placement.provider(f"{node(host)}_pci_0000_{bus}_00_0", parent=root)
        placement.inventories(child, {"VGPU": {"total": 2, "max_unit": 2}})
        placement.traits(child, ["CUSTOM_NVIDIA_A100_3G_40GB"])
    return root


def plain_host(placement, host: str) -> str:
    root = placement.provider(node(host), uuid=root_uuid(host))
    placement.inventories(root, {
        "VCPU": {"total": 96, "max_unit": 96, "reserved": 4, "allocation_ratio": 4.0},
        "MEMORY_MB": {"total": 786432, "max_unit": 786432, "reserved": 16384},
        "DISK_GB": {"total": 1788, "max_unit": 1788}})
    placement.traits(root, ["COMPUTE_NODE", "COMPUTE_STATUS_DISABLED"])
    return root


def build(placement, cloud: FakeCloud) -> dict[str, str]:
    """Fill Placement and the fake Nova; ``{host: root provider uuid}``."""
    roots = {"cmp0000": hgx_host(placement, "cmp0000"), "cmp0001": hgx_host(placement, "cmp0001"),
             "cmp0002": plain_host(placement, "cmp0002"), "cmp0003": mig_host(placement, "cmp0003")}
    for index, (host, uuid) in enumerate(roots.items()):
        disabled = host == "cmp0002"
        cloud.add_compute_host(host, node(host), node_uuid=uuid, zone="az-1",
                               status="disabled" if disabled else "enabled",
                               disabled_reason="hardware check" if disabled else None,
                               host_ip=f"10.0.0.{index + 10}")
    cloud.aggregates = [{"id": 1, "uuid": AGGREGATE, "name": "gpu-team-h100",
                         "availability_zone": None, "metadata": {"filter_tenant_id": "p" * 32},
                         "hosts": ["cmp0000", "cmp0001"], "created_at": "2026-01-01T00:00:00",
                         "updated_at": None, "deleted": False, "deleted_at": None}]
    return roots


def children(placement, root: str) -> list[str]:
    providers = placement.call("GET", f"/resource_providers?in_tree={root}")["resource_providers"]
    return sorted(p["uuid"] for p in providers if p["uuid"] != root)


def boot(placement, cloud: FakeCloud, server: str, host: str,
         allocations: dict[str, dict[str, int]]) -> None:
    """What Nova does for a new server: its record on ``host`` and its allocations."""
    from tests.fake_openstack import now_iso

    placement.allocate(server, allocations)
    cloud.add_server(server, host, node(host), updated=now_iso(), created=now_iso())


def delete(placement, cloud: FakeCloud, server: str) -> None:
    """What Nova does when a server is deleted: the record marked deleted, allocations freed.

    Placement does not move the providers' generations for the freed allocations.
    """
    cloud.delete_server(server)
    placement.free(server)
