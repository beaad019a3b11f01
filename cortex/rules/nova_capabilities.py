"""Nova's ComputeCapabilitiesFilter rule: a flavor's ``capabilities:*`` extra specs on a node.

Source: ``nova/scheduler/filters/compute_capabilities_filter.py`` and
``extra_specs_ops.py`` of Nova 34 (read for the facts, not copied). The rule:

* ``hw:maxphysaddr_bits: N`` stands for ``capabilities:cpu_info:maxphysaddr:bits: >= N``.
* A key ``capabilities:<a>[:<b>...]`` names a node attribute (Nova's ``HostState``
  names: :data:`HOST_STATE_ATTRIBUTES`), else one of the compute node's ``stats``
  (``num_instances``, ``num_vm_<state>``, ``num_task_<state>``, ``num_proj_<project>``,
  ``io_workload``, ``failed_builds``), and then keys inside it; a JSON string on the
  way is decoded (``cpu_info`` is one). Keys of another scope are skipped; a key without
  a scope is checked only when it is a HostState attribute or a stat.
* A missing value fails the node. Otherwise the requirement is matched against the
  value as Python prints it (``str(value)``): a list capability is its printed list
  (``"['avx', 'avx2']"``), so a plain requirement never equals one element, and
  ``<in>``/``<all-in>`` search the printed text (``<in> sve`` also finds ``sve2``).
* Operators (first word of the requirement): ``=`` (value >= operand), ``==``, ``!=``,
  ``>=``, ``<=`` numeric; ``s==``, ``s!=``, ``s<``, ``s<=``, ``s>``, ``s>=`` string on
  the operand's first word; ``<in>`` substring; ``<all-in>`` every word a substring;
  ``<or> a <or> b`` equals one of the words. Without an operator the printed value must
  equal the whole requirement; an operator without an operand does not match.

Where Nova raises instead of answering (a numeric operator on a value or operand that
is not a number, a bare ``<or>``), the node fails here: :func:`match` is False.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Mapping
from typing import Any

from cortex.rules import extra_specs

#: The attributes of Nova's ``HostState`` an unscoped extra spec may name: such a key is
#: checked (a value Cortex does not hold fails the node, as Nova fails a None); any other
#: unscoped key is skipped.
HOST_STATE_ATTRIBUTES = frozenset({
    "host", "nodename", "uuid", "total_usable_ram_mb", "total_usable_disk_gb",
    "disk_mb_used", "free_ram_mb", "free_disk_mb", "vcpus_total", "vcpus_used",
    "pci_stats", "numa_topology", "num_instances", "num_io_ops", "failed_builds",
    "host_ip", "hypervisor_type", "hypervisor_version", "hypervisor_hostname", "cpu_info",
    "supported_instances", "limits", "metrics", "aggregates", "instances",
    "ram_allocation_ratio", "cpu_allocation_ratio", "disk_allocation_ratio", "cell_uuid",
    "updated", "allocation_candidates", "service", "stats"})


def _numeric(compare: Callable[[float, float], bool]) -> Callable[[str, str], bool]:
    """A comparison of both sides read as floats; False where Nova's ``float`` raises."""
    def check(value: str, operand: str) -> bool:
        try:
            return compare(float(value), float(operand))
        except ValueError:
            return False
    return check


_OPERATORS: dict[str, Callable[[str, Any], bool]] = {
    "=": _numeric(operator.ge), "==": _numeric(operator.eq), "!=": _numeric(operator.ne),
    ">=": _numeric(operator.ge), "<=": _numeric(operator.le),
    "s==": operator.eq, "s!=": operator.ne, "s<": operator.lt, "s<=": operator.le,
    "s>": operator.gt, "s>=": operator.ge,
    "<in>": lambda value, operand: operand in value,
    "<all-in>": lambda value, operands: all(word in value for word in operands),
}


def match(value: str, requirement: str) -> bool:
    """Whether the printed capability ``value`` meets ``requirement`` (Nova's ``match``)."""
    words = requirement.split()
    op = words.pop(0) if words else None
    if op != "<or>" and op not in _OPERATORS:
        return value == requirement
    if op == "<or>":
        return value in words[0::2]
    if not words:
        return False
    return _OPERATORS[op](value, words if op == "<all-in>" else words[0])


def lookup(capabilities: Mapping[str, Any], path: list[str]) -> Any:
    """The value at ``path``, decoding JSON strings on the way; None when a step is missing.

    A first name that is no attribute (or a None one) is read from the ``stats``, as Nova
    reads a HostState.
    """
    first = capabilities.get(path[0])
    if first is None:
        first = (capabilities.get("stats") or {}).get(path[0])
    return extra_specs.lookup({path[0]: first}, path)


def printed(value: Any) -> str:
    """``value`` as Nova prints it before matching (Python's ``str``)."""
    return str(value)


def capabilities_unmet(extra_specs: Mapping[str, str], capabilities: Mapping[str, Any], *,
                       case_insensitive: frozenset[str] = frozenset()) -> str | None:
    """The first extra spec ``capabilities`` (one node's HostState values) fails, as a reason.

    ``capabilities``: Nova's HostState attribute names to values, ``cpu_info`` a JSON
    object text (:func:`node_capabilities` builds it). ``case_insensitive``: top-level
    names whose printed value and requirement are compared lower-cased (an operator's
    option; Nova compares exactly). None when every spec is met.
    """
    specs = dict(extra_specs)
    bits = specs.pop("hw:maxphysaddr_bits", None)
    if bits is not None:
        specs["capabilities:cpu_info:maxphysaddr:bits"] = ">= " + str(bits)
    for key, requirement in specs.items():
        path = key.split(":")
        if len(path) == 1:
            if key not in HOST_STATE_ATTRIBUTES and key not in (capabilities.get("stats") or {}):
                continue
        elif path[0] != "capabilities":
            continue
        else:
            path = path[1:]
        value = lookup(capabilities, path)
        if value is None:
            return f"no capability {':'.join(path)} for {key}={requirement}"
        shown, wanted = printed(value), str(requirement)
        if path[0] in case_insensitive:
            shown, wanted = shown.lower(), wanted.lower()
        if not match(shown, wanted):
            return f"{':'.join(path)}={_short(shown)} does not meet {key}={requirement}"
    return None


def _short(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


def node_capabilities(host, node, num_io_ops: int) -> dict[str, Any]:
    """Nova's HostState values for one node of ``host`` (a :class:`HostState` of Cortex).

    Nova's sources: the compute node record and its ``stats`` (:func:`node_stats`);
    ``memory_mb`` is ``total_usable_ram_mb``, ``free_ram_mb`` is total less reserved
    less used, disks in GiB but ``free_disk_mb`` in MiB, the allocation ratios;
    ``cpu_info`` as the JSON text the hypervisor reported (:func:`cpu_info_text`),
    ``supported_instances`` as lists. Values Cortex
    does not hold are left out (a spec naming them fails the node).
    """
    from cortex.rules.image_properties import supported_instances

    vcpu, ram, disk = (node.inventories.get(rc) for rc in ("VCPU", "MEMORY_MB", "DISK_GB"))
    capabilities: dict[str, Any] = {
        "host": host.host, "nodename": node.node, "hypervisor_hostname": node.node,
        "uuid": node.uuid, "hypervisor_type": node.hypervisor_type,
        "hypervisor_version": node.hypervisor_version, "host_ip": node.host_ip,
        "cpu_info": cpu_info_text(node, host.cpu_features),
        "supported_instances": [list(t) for t in supported_instances(node)],
        "num_instances": len(host.instances), "num_io_ops": num_io_ops,
        "failed_builds": host.failed_builds,
        "stats": node_stats(host, num_io_ops),
    }
    if vcpu is not None:
        capabilities |= {"vcpus_total": vcpu.total, "vcpus_used": vcpu.used,
                         "cpu_allocation_ratio": vcpu.allocation_ratio}
    if ram is not None:
        capabilities |= {"total_usable_ram_mb": ram.total,
                         "free_ram_mb": ram.total - ram.reserved - ram.used,
                         "ram_allocation_ratio": ram.allocation_ratio}
    if disk is not None:
        capabilities |= {"total_usable_disk_gb": disk.total,
                         "free_disk_mb": (disk.total - disk.reserved - disk.used) * 1024,
                         "disk_mb_used": (disk.reserved + disk.used) * 1024,
                         "disk_allocation_ratio": disk.allocation_ratio}
    return {k: v for k, v in capabilities.items() if v is not None}


def node_stats(host, num_io_ops: int) -> dict[str, str]:
    """The compute node's ``stats`` as nova-compute keeps them, from the host's instances.

    ``num_instances``, ``num_vm_<vm_state>``, ``num_task_<task_state>`` (``None`` for no
    task), ``num_proj_<project>``, ``io_workload`` and ``failed_builds``, as strings (the
    ComputeNode field holds strings). Counts that fell to zero, which nova-compute keeps,
    are absent here.
    """
    stats: dict[str, int] = {"num_instances": len(host.instances)}
    for instance in host.instances:
        for key in (f"num_vm_{instance.vm_state}", f"num_task_{instance.task_state}",
                    f"num_proj_{instance.project_id}"):
            stats[key] = stats.get(key, 0) + 1
    stats |= {"io_workload": num_io_ops, "failed_builds": host.failed_builds}
    return {k: str(v) for k, v in stats.items()}


def cpu_info_text(node, cpu_features=frozenset()) -> str | None:
    """The node's ``cpu_info`` as the JSON text Nova keeps, in libvirt's key order.

    Features keep the reported order.
    Where the stored ``cpu_info`` (the hypervisor's, else cortex-agent's) lacks ``arch``
    or ``features``, the node's architecture and the host's CPU flags (sorted) stand in;
    None when there is nothing.
    """
    info = dict(node.cpu_info)
    if "arch" not in info and node.cpu_arch:
        info["arch"] = node.cpu_arch
    if "features" not in info and cpu_features:
        info["features"] = sorted(cpu_features)
    if not info:
        return None
    return json.dumps(_in_order(info, _CPU_INFO_ORDER))


#: The key order of libvirt's ``cpu_info`` (the stored JSON object may not keep it).
_CPU_INFO_ORDER = ("arch", "model", "vendor", "topology", "maxphysaddr", "features")
_NESTED_ORDER = {"topology": ("cells", "sockets", "cores", "threads"),
                 "maxphysaddr": ("mode", "bits")}


def _in_order(info: Mapping[str, Any], order: tuple[str, ...]) -> dict[str, Any]:
    """``info`` with the keys of ``order`` first, in that order, nested objects likewise."""
    keys = [k for k in order if k in info] + [k for k in info if k not in order]
    return {k: _in_order(info[k], _NESTED_ORDER[k])
            if k in _NESTED_ORDER and isinstance(info[k], Mapping) else info[k] for k in keys}
