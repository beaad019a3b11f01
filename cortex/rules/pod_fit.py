"""Which offered Kubernetes nodes a pod cannot have, whatever other pods leave.

Rule (kube-scheduler's own fit check, ``pkg/scheduler/framework/plugins/noderesources``
and ``nodeaffinity``): a node whose labels the pod's node selector or required node
affinity refuse, or whose allocatable holds less of an extended resource than the pod
requests, is unschedulable and unresolvable; no preemption changes that. For GPUs
Cortex reads the node's cortex-agent report where it has one (its MIG instances), and
the Node object's ``status.allocatable`` where it has none. No database, no HTTP.
"""

from __future__ import annotations

from cortex.knowledge.topology import HostTopology
from cortex.knowledge.view import KnowledgeView
from cortex.request.kubernetes import (
    PodCall,
    allocatable_refusal,
    node_refusal,
    pod_mig,
    pod_resources,
)


def node_refusals(call: PodCall, view: KnowledgeView) -> dict[str, str]:
    """``{node: reason}`` of the offered nodes the pod cannot have, whatever else leaves.

    In this order: the node's labels against the pod's node selector and required node
    affinity (:func:`~cortex.request.kubernetes.node_refusal`, with the Node object);
    for a MIG pod on a node with a cortex-agent report, the MIG instances of its profile
    the report shows, free or in use (:func:`mig_refusal`); for a node without a report,
    its own ``status.allocatable`` (:func:`~cortex.request.kubernetes.allocatable_refusal`,
    with the Node object; a node sent by name only is left to the pipeline, which keeps
    a node it does not know as ``[scheduler] unknown_host_policy`` says). Raises
    BadRequest for a pod that cannot be judged (a quantity that is not one).
    """
    wanted = pod_resources(call.pod)
    mig = pod_mig(wanted)
    refused = {}
    for name in call.node_names:
        node = call.nodes.get(name)
        reason = node_refusal(call.pod, node) if node is not None else None
        state = view.hosts.get(name)
        topology = state.topology if state is not None else None
        if reason is None and topology is not None and mig is not None:
            reason = mig_refusal(mig, topology)
        elif reason is None and topology is None and node is not None:
            reason = allocatable_refusal(wanted, node)
            reason = reason and f"{reason} (no cortex-agent report of the node)"
        if reason is not None:
            refused[name] = reason
    return refused


def mig_refusal(mig: tuple[str, str, int], topology: HostTopology) -> str | None:
    """Why a node's report cannot hold the pod's MIG instances, free or not; None if it can.

    ``mig``: ``(resource, profile, count)`` (:func:`~cortex.request.kubernetes.pod_mig`).
    The node's GPUs must be split into at least ``count`` MIG instances of ``profile``
    (:class:`~cortex.knowledge.topology.MigInstance`), in use or not, as kube-scheduler
    wants an extended resource's request within the node's allocatable; whether enough
    are free is the pipeline's ``filter_gpu_capacity`` to say. A node without a GPU in
    MIG mode holds none: Kubernetes has no Placement that already vouched for its vGPU
    capacity, as Nova's VGPU candidates have.
    """
    resource, profile, count = mig
    have = sum(1 for gpu in topology.gpus for instance in gpu.mig_instances
               if instance.profile == profile)
    if have >= count:
        return None
    split = any(gpu.mig_mode == "enabled" or gpu.mig_instances for gpu in topology.gpus)
    return (f"{resource}: {count} requested, the node's cortex-agent report shows {have} "
            f"MIG {profile} instances{'' if split else ' (no GPU in MIG mode)'}")
