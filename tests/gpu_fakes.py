"""Builders for the GPU weigher and simulator tests: shipped boards with usage, GPU requests."""

from __future__ import annotations

from dataclasses import replace

import yaml

from cortex.knowledge.topology import topology_from_report
from cortex.request.base import Candidate
from cortex.request.nova import NovaRequest
from cortex.simulator.boards import board_inventories, board_report
from tests.conftest import REPO
from tests.fakes import host, inventory

BOARDS = yaml.safe_load((REPO / "etc/cortex/simulator/boards.yaml").read_text())["boards"]
H100, A100, L40S = "2330", "20b5", "26b9"


def board_topology(name, in_use=(), pinned=None, memory_used=None, **board_changes):
    """The topology of a shipped board with GPUs in use and per-cell usage.

    ``pinned``: ``{cell: number of its dedicated CPUs pinned}``; ``memory_used``:
    ``{cell: MiB used}``.
    """
    board = {**BOARDS[name], **board_changes}
    report = board_report(board)
    for gpu in report["gpus"]:
        gpu["in_use"] = gpu["pci_address"] in in_use
    for cell in report["numa_cells"]:
        from cortex.cpuset import format_cpuset, parse_cpuset

        count = (pinned or {}).get(cell["id"], 0)
        cell["pinned_cpus"] = format_cpuset(sorted(parse_cpuset(cell["dedicated_cpus"]))[:count])
        cell["memory_usage_mb"] = (memory_used or {}).get(cell["id"], 0)
    return topology_from_report(report)


def gpu_host(name="h", board="hgx-h100-8gpu", az="az-1", features=None, topology=None,
             board_changes=None, **usage):
    """A HostState with a shipped board's inventories and topology (``usage``: see above)."""
    raw = board_inventories({**BOARDS[board], **(board_changes or {})})
    inventories = {rc: inventory(v["total"], ratio=v.get("allocation_ratio", 1.0))
                   for rc, v in raw.items()}
    state = host(name, az=az, inventories=inventories, features=features)
    return replace(state, topology=topology or board_topology(board, **usage,
                                                              **(board_changes or {})))


def gpu_request(gpus=2, policy="legacy", numa_nodes=1, vcpus=8, memory_mb=65536,
                pinned=True, products=(H100,), vgpus=0, hosts=("h",)):
    """A parsed NovaRequest for ``gpus`` passthrough GPUs (or ``vgpus`` vGPUs)."""
    extra = {}
    if pinned:
        extra["hw:cpu_policy"] = "dedicated"
    if numa_nodes:
        extra["hw:numa_nodes"] = str(numa_nodes)
    if vgpus:
        extra["resources:VGPU"] = str(vgpus)
    data = {"flavor": {"vcpus": vcpus, "memory_mb": memory_mb, "root_gb": 0,
                       "extra_specs": extra},
            "image": {"properties": {}}, "instance_uuid": "i-1", "num_instances": 1}
    if gpus:
        specs = [{"vendor_id": "10de", "product_id": p} for p in products] or [
            {"vendor_id": "10de"}]
        data["pci_requests"] = {"requests": [{"count": gpus, "spec": specs,
                                              "numa_policy": policy}]}
    body = {"spec": {"nova_object.data": data}, "hosts": [{"host": h} for h in hosts],
            "weights": dict.fromkeys(hosts, 0.0)}
    return NovaRequest.from_body(body)


def weigh(plugin, state, request, view=None):
    """The raw weight of ``state`` for ``request``, bound to a view holding the host."""
    from tests.fakes import view as make_view

    bound = plugin.bind(request, view or make_view(state))
    return bound.weigh(state, request, Candidate(state.host, (), 0.0))

