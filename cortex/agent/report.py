"""Assemble one topology report: the host's NUMA cells and NICs, its GPUs and GPU pairs."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any

import cortex
from cortex.agent import gpus as gpu_facts
from cortex.agent import host as host_facts


def load_nvml() -> Any:
    """The ``pynvml`` module of nvidia-ml-py; ImportError when the ``agent`` extra is missing."""
    import pynvml  # lazy: the package imports without nvidia-ml-py

    return pynvml


def build_report(host: str, nvml: Any = None, sysfs_root: str | os.PathLike = "/",
                 proc_root: str | os.PathLike = "/proc",
                 nova_config: str | os.PathLike | None = None,
                 now: datetime | None = None) -> dict:
    """The report ``POST /v1/topology/<host>`` takes (``TopologyReport`` in the OpenAPI document).

    ``nvml`` is the NVML module (default: ``pynvml``, loaded here); a host without
    nvidia-ml-py, without a driver or without GPUs says why in ``nvml_error`` (GPUs sysfs
    lists, e.g. bound to vfio-pci, are still reported, without NVML's facts).
    ``nova_config`` is Nova's configuration file, read for the CPU sets (``[compute]
    cpu_dedicated_set``/``cpu_shared_set``, ``vcpu_pin_set``), ``reserved_huge_pages`` and
    ``my_ip`` (the report's ``host_ip``). ``cpu_info``: :func:`host_facts.cpu_info`.
    Raises ValueError for a CPU list Nova would reject.
    """
    fs = host_facts.Sysfs(sysfs_root)
    nova = host_facts.read_nova_cpu_sets(nova_config)
    cells = host_facts.cell_cpus(fs)
    usage = host_facts.guest_usage(fs, cells)
    if nvml is None:
        try:
            nvml = load_nvml()
        except ImportError:
            nvml = None
    facts = gpu_facts.collect_nvml(nvml, cells) if nvml is not None else {
        "error": "nvidia-ml-py (pynvml) is not installed", "gpus": {}, "links": []}
    held = host_facts.held_vfio_groups(proc_root)
    gpus = gpu_facts.merge_gpus(gpu_facts.sysfs_gpus(fs), facts["gpus"], held)
    return {
        "host": host,
        "agent_version": cortex.__version__,
        "collected_at": (now or datetime.now(UTC)).isoformat().replace("+00:00", "Z"),
        "driver_version": facts.get("driver_version"),
        "cuda_driver_version": facts.get("cuda_driver_version"),
        "nvml_error": facts["error"],
        "numa_cells": host_facts.numa_cells(fs, nova, usage),
        "gpus": gpus,
        "gpu_links": facts["links"],
        "nics": host_facts.nics(fs),
        "guests": usage.guests,
        **({"cpu_info": info} if (info := host_facts.cpu_info(fs, proc_root)) else {}),
        **({"host_ip": ip} if (ip := host_facts.host_ip(nova_config)) else {}),
    }
