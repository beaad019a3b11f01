"""MIG-backed vGPU hosts in the pipelines' replays, against the same hosts with whole GPUs.

Nova's MIG-backed vGPU: the operator partitions each GPU beforehand (``nvidia-smi mig
-cgi``), every GPU instance becomes a Placement provider of one VGPU tagged with its
profile's trait, and a flavor asks ``resources:VGPU=1`` with
``trait:CUSTOM_NVIDIA_<profile>=required``; nova-compute hands the guest a free instance
of that profile and the instance stays when the guest leaves. The layout is fixed
while the hosts serve guests (changing it means draining the GPU).

:func:`mig_fleet` puts a fleet's GPUs in MIG mode with a layout per GPU (numbered across
the hosts in order), :func:`whole_gpu_requests` turns MIG requests into the same
requests of whole passthrough GPUs, and :func:`comparison` builds both sides of one
scenario: the MIG fleet with a layout derived from the trace's demand
(:func:`cortex.simulator.mig.demand_layouts`) and its MIG requests, and the same hosts
without MIG and the same requests as whole GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from cortex.simulator.fleet import Fleet, HostSpec, SimulationError
from cortex.simulator.mig import demand_layouts
from cortex.simulator.trace import TraceRequest


def _gpu_count(host: HostSpec) -> int:
    return len(host.board.get("gpus") or ()) or int(host.board.get("gpu_count", 0))


def mig_fleet(fleet: Fleet, layouts: Sequence[Sequence[str]]) -> Fleet:
    """``fleet`` with every GPU in MIG mode: ``layouts[i]`` (profile names) on GPU ``i``.

    GPUs are numbered host after host in the fleet's order, each host's in its board's
    order; each host gets its own board (``mig.layouts``, see
    :func:`cortex.simulator.boards.mig_layouts`). SimulationError when the layouts are
    not one per GPU or a host has time-sliced vGPUs.
    """
    total = sum(_gpu_count(h) for h in fleet.hosts)
    if len(layouts) != total:
        raise SimulationError(f"{len(layouts)} MIG layouts for {total} GPUs")
    hosts, first = [], 0
    for host in fleet.hosts:
        count = _gpu_count(host)
        if host.board.get("vgpu_slots"):
            raise SimulationError(f"host {host.name}: time-sliced vGPU board, not MIG")
        if count:
            board = dict(host.board) | {"mig": {"layouts": [list(layout) for layout in
                                                            layouts[first:first + count]]}}
            host = replace(host, board=board, board_name=f"{host.board_name} MIG")
        hosts.append(host)
        first += count
    return replace(fleet, name=f"{fleet.name}-mig", hosts=tuple(hosts))


def whole_gpu_requests(trace: Sequence[TraceRequest]) -> list[TraceRequest]:
    """The same requests asking whole passthrough GPUs: one GPU per vGPU, no MIG profile.

    Same ids, times, CPUs and memory; the PCI request gets Nova's default NUMA policy
    (``legacy``) and accepts any GPU model. Requests of passthrough GPUs stay as they are.
    """
    return [replace(r, gpus=r.vgpus, vgpus=0, mig_profile=None, numa_policy="legacy",
                    products=()) if r.vgpus else r for r in trace]


@dataclass(frozen=True)
class MigComparison:
    """One scenario's two sides: MIG layout and MIG requests, whole GPUs and whole requests."""

    layouts: tuple[tuple[str, ...], ...]
    mig_fleet: Fleet
    mig_trace: list[TraceRequest]
    whole_fleet: Fleet
    whole_trace: list[TraceRequest]


def comparison(fleet: Fleet, trace: Sequence[TraceRequest], sizing: str = "peak"
               ) -> MigComparison:
    """Both sides of the MIG scenario on ``fleet`` (whole GPUs) for the MIG ``trace``.

    The trace's requests that name a MIG profile (others are left out); the layout
    derived from their demand (:func:`cortex.simulator.mig.demand_layouts` with
    ``sizing``, over the fleet's GPUs). SimulationError when no request names a profile.
    """
    asked = [r for r in trace if r.mig_profile]
    if not asked:
        raise SimulationError("no MIG requests in the trace")
    gpus = sum(_gpu_count(h) for h in fleet.hosts)
    layouts = demand_layouts([(str(r.mig_profile), r.arrival, r.departure)
                              for r in asked for _ in range(r.vgpus)], gpus,
                             sizing=sizing)
    return MigComparison(tuple(map(tuple, layouts)), mig_fleet(fleet, layouts), asked,
                         fleet, whole_gpu_requests(asked))
