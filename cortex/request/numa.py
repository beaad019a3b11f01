"""A guest's NUMA topology derived from flavor and image by Nova's rules.

Nova's ``nova/virt/hardware.py numa_get_constraints`` on the flavor's ``hw:*`` extra
specs and the image's ``hw_*`` properties, used when the RequestSpec carries no
``numa_topology``. A guest gets a NUMA topology when it asks for NUMA nodes
(``hw:numa_nodes``), explicit pages (``hw:mem_page_size``) or pinned CPUs
(``hw:cpu_policy`` dedicated or mixed, or ``resources:PCPU``). Cells are split evenly
(``hw:numa_nodes`` must divide vCPUs and memory) unless ``hw:numa_cpus.N`` and
``hw:numa_mem.N`` place them. Requests Nova would reject raise BadRequest.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from cortex.cpuset import parse_cpuset
from cortex.request.base import BadRequest

MEMPAGES_SMALL, MEMPAGES_LARGE, MEMPAGES_ANY = -1, -2, -3
CPU_POLICIES = ("shared", "dedicated", "mixed")
THREAD_POLICIES = ("prefer", "isolate", "require")
_SIZE = re.compile(r"^\s*(\d+)\s*([KMGT]?)(i?B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1, "M": 1024, "G": 1024 ** 2, "T": 1024 ** 3}


def _pair(specs: Mapping[str, str], image: Mapping[str, Any], name: str
          ) -> tuple[str | None, Any]:
    """``(flavor hw:<name>, image hw_<name>)``."""
    return specs.get(f"hw:{name}"), image.get(f"hw_{name}")


def cpu_policy(specs: Mapping[str, str], image: Mapping[str, Any]) -> str | None:
    """``hw:cpu_policy`` with the image's ``hw_cpu_policy`` (get_cpu_policy_constraint)."""
    flavor, image_policy = _pair(specs, image, "cpu_policy")
    for value in (flavor, image_policy):
        if value and value not in CPU_POLICIES:
            raise BadRequest(f"hw:cpu_policy={value!r} is not one of {', '.join(CPU_POLICIES)}")
    if flavor == "dedicated":
        return flavor
    if flavor == "mixed":
        if image_policy == "dedicated":
            raise BadRequest("the image's hw_cpu_policy=dedicated conflicts with the "
                             "flavor's mixed")
        return flavor
    if flavor == "shared":
        if image_policy in ("dedicated", "mixed"):
            raise BadRequest(f"the image's hw_cpu_policy={image_policy} needs the flavor's consent")
        return flavor
    return image_policy or None


def thread_policy(specs: Mapping[str, str], image: Mapping[str, Any]) -> str | None:
    """``hw:cpu_thread_policy`` with the image's (get_cpu_thread_policy_constraint)."""
    flavor, image_policy = _pair(specs, image, "cpu_thread_policy")
    for value in (flavor, image_policy):
        if value and value not in THREAD_POLICIES:
            raise BadRequest(f"hw:cpu_thread_policy={value!r} is not one of "
                             f"{', '.join(THREAD_POLICIES)}")
    if flavor and image_policy and flavor != image_policy:
        raise BadRequest(f"the image's hw_cpu_thread_policy={image_policy} conflicts with the "
                         f"flavor's {flavor}")
    return flavor or image_policy or None


def page_size(specs: Mapping[str, str], image: Mapping[str, Any]) -> int | None:
    """``hw:mem_page_size`` in KiB (or small -1, large -2, any -3).

    The image may only narrow a flavor's ``large`` or ``any``
    (_get_numa_pagesize_constraint).
    """
    flavor, image_size = _pair(specs, image, "mem_page_size")
    if image_size and not flavor:
        raise BadRequest(f"the image's hw_mem_page_size={image_size} needs the flavor's consent")
    if not flavor:
        return None
    size = _page_size(flavor)
    if image_size and size in (MEMPAGES_ANY, MEMPAGES_LARGE):
        return _page_size(str(image_size))
    if image_size:
        raise BadRequest(f"the image's hw_mem_page_size={image_size} conflicts with the "
                         f"flavor's {flavor}")
    return size


def _page_size(text: str) -> int:
    """``small``/``large``/``any``, a number of KiB, or a size with a unit (``1GB``)."""
    keywords = {"small": MEMPAGES_SMALL, "large": MEMPAGES_LARGE, "any": MEMPAGES_ANY}
    if text in keywords:
        return keywords[text]
    match = _SIZE.match(text)
    if not match or (not match[2] and match[3]):
        raise BadRequest(f"hw:mem_page_size={text!r} is not a page size")
    if not match[2] and not match[3]:
        return int(match[1])
    return int(match[1]) * _UNITS[match[2].upper()]


def _node_count(specs: Mapping[str, str], image: Mapping[str, Any]) -> int | None:
    """``hw:numa_nodes`` (or the image's, when the flavor has none); at least 1."""
    flavor, image_nodes = _pair(specs, image, "numa_nodes")
    if flavor and image_nodes:
        raise BadRequest("the image may not set hw_numa_nodes when the flavor does")
    nodes = flavor or image_nodes
    if nodes is None:
        return None
    if not str(nodes).strip().isdigit() or int(nodes) < 1:
        raise BadRequest(f"hw:numa_nodes={nodes!r} is not a positive integer")
    return int(nodes)


def _placement_lists(specs: Mapping[str, str], image: Mapping[str, Any]
                     ) -> tuple[list[frozenset[int]] | None, list[int] | None]:
    """``hw:numa_cpus.N`` and ``hw:numa_mem.N`` (flavor, else image lists), N = 0, 1, ..."""
    def flavor_list(prefix: str) -> list[str]:
        values, node = [], 0
        while f"hw:{prefix}.{node}" in specs:
            values.append(specs[f"hw:{prefix}.{node}"])
            node += 1
        return values

    cpus, mems = flavor_list("numa_cpus"), flavor_list("numa_mem")
    if (cpus or mems) and (image.get("hw_numa_cpus") or image.get("hw_numa_mem")):
        raise BadRequest("the image may not place NUMA cells when the flavor does")
    if not cpus and not mems:
        cpus = [",".join(map(str, c)) if isinstance(c, list | tuple | set) else str(c)
                for c in image.get("hw_numa_cpus") or ()]
        mems = [str(m) for m in image.get("hw_numa_mem") or ()]
    try:
        return ([parse_cpuset(c) for c in cpus] or None, [int(m) for m in mems] or None)
    except ValueError as exc:
        raise BadRequest(f"hw:numa_cpus/hw:numa_mem: {exc}") from None


def _dedicated_mask(specs: Mapping[str, str], vcpus: int, policy: str | None) -> frozenset[int]:
    """Dedicated vCPUs of a ``mixed`` guest: ``hw:cpu_dedicated_mask`` or the realtime mask."""
    mask = specs.get("hw:cpu_dedicated_mask")
    if not mask and specs.get("hw:cpu_realtime") in ("yes", "true", "True", "1"):
        mask = specs.get("hw:cpu_realtime_mask")
    if mask and policy != "mixed":
        raise BadRequest("hw:cpu_dedicated_mask needs hw:cpu_policy=mixed")
    if policy != "mixed":
        return frozenset()
    if not mask:
        raise BadRequest("hw:cpu_policy=mixed needs hw:cpu_dedicated_mask or a realtime mask")
    text = f"0-{vcpus - 1},{mask}" if mask.strip().startswith("^") else mask
    try:
        pcpus = parse_cpuset(text)
    except ValueError as exc:
        raise BadRequest(f"hw:cpu_dedicated_mask: {exc}") from None
    if not pcpus or not pcpus < frozenset(range(vcpus)):
        raise BadRequest("hw:cpu_dedicated_mask must leave some, but not all, vCPUs shared")
    return pcpus


def _explicit_cpus(specs: Mapping[str, str], policy: str | None, vcpus: int,
                   emulator: str | None) -> str | None:
    """``resources:PCPU``/``resources:VCPU`` turn into a policy, as in numa_get_constraints."""
    pcpu, vcpu = specs.get("resources:PCPU"), specs.get("resources:VCPU")
    if (pcpu or vcpu) and policy:
        raise BadRequest("resources:VCPU/PCPU cannot be combined with hw:cpu_policy")
    if pcpu and vcpu:
        raise BadRequest("resources:VCPU and resources:PCPU cannot be combined")
    if pcpu:
        expected = vcpus + (1 if emulator == "isolate" else 0)
        if not pcpu.strip().isdigit() or int(pcpu) != expected:
            raise BadRequest(f"resources:PCPU={pcpu} must equal the flavor's vCPUs ({expected})")
        return "dedicated"
    return policy


def emulator_threads_policy(specs: Mapping[str, str]) -> str | None:
    """``hw:emulator_threads_policy`` (``share`` or ``isolate``)."""
    policy = specs.get("hw:emulator_threads_policy")
    if policy and policy not in ("share", "isolate"):
        raise BadRequest(f"hw:emulator_threads_policy={policy!r} is not share or isolate")
    return policy or None


def numa_constraints(vcpus: int, memory_mb: int, specs: Mapping[str, str],
                     image: Mapping[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
    """``(cells, emulator_threads_policy)`` of a guest; no cells when it needs no NUMA.

    Each cell: ``{"id", "cpuset", "pcpuset", "memory" (MiB), "pagesize", "cpu_policy",
    "cpu_thread_policy"}`` as Nova's InstanceNUMACell. Raises BadRequest where Nova
    raises (asymmetric split, CPUs out of range or unassigned, memory not adding up,
    conflicting flavor and image properties).
    """
    emulator = emulator_threads_policy(specs)
    policy = _explicit_cpus(specs, cpu_policy(specs, image), vcpus, emulator)
    threads = thread_policy(specs, image)
    pagesize = page_size(specs, image)
    nodes = _node_count(specs, image)
    dedicated = _dedicated_mask(specs, vcpus, policy)
    if emulator == "isolate" and policy not in ("dedicated", "mixed"):
        raise BadRequest("hw:emulator_threads_policy=isolate needs pinned CPUs")
    if not (nodes or pagesize or policy in ("dedicated", "mixed")):
        return [], emulator
    cpus = frozenset(range(vcpus))
    pcpus = cpus if policy == "dedicated" else dedicated
    nodes = nodes or 1
    cpu_list, mem_list = _placement_lists(specs, image)
    if cpu_list is None and mem_list is None:
        if vcpus % nodes or memory_mb % nodes:
            raise BadRequest(f"{vcpus} vCPUs and {memory_mb} MiB cannot be split evenly over "
                             f"{nodes} NUMA nodes")
        size = vcpus // nodes
        cpu_list = [frozenset(range(n * size, (n + 1) * size)) for n in range(nodes)]
        mem_list = [memory_mb // nodes] * nodes
    elif cpu_list is None or mem_list is None or len(cpu_list) != nodes \
            or len(mem_list) != nodes:
        raise BadRequest(f"hw:numa_cpus.N and hw:numa_mem.N must both be given for all "
                         f"{nodes} NUMA nodes")
    else:
        _check_placement(cpu_list, mem_list, vcpus, memory_mb)
    cells = [{"id": n, "cpuset": cpu_list[n] - pcpus, "pcpuset": cpu_list[n] & pcpus,
              "memory": mem_list[n], "pagesize": pagesize, "cpu_policy": policy,
              "cpu_thread_policy": threads} for n in range(nodes)]
    return cells, emulator


def _check_placement(cpu_list: list[frozenset[int]], mem_list: list[int], vcpus: int,
                     memory_mb: int) -> None:
    """Every vCPU in exactly one cell, and the cells' memory adds up to the flavor's."""
    seen: set[int] = set()
    for cpus in cpu_list:
        out = [c for c in cpus if c >= vcpus]
        if out:
            raise BadRequest(f"hw:numa_cpus: vCPU {out[0]} is out of range 0-{vcpus - 1}")
        if seen & cpus:
            raise BadRequest(f"hw:numa_cpus: vCPU {min(seen & cpus)} is in two cells")
        seen |= cpus
    if len(seen) != vcpus:
        raise BadRequest(f"hw:numa_cpus: vCPUs {sorted(set(range(vcpus)) - seen)} are in no cell")
    if sum(mem_list) != memory_mb:
        raise BadRequest(f"hw:numa_mem: the cells' {sum(mem_list)} MiB differ from the "
                         f"flavor's {memory_mb} MiB")
