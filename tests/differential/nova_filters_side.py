"""The Nova side of the host-facts differential: Nova's ComputeCapabilitiesFilter and
ImagePropertiesFilter on Nova's own ``HostState``.

Runs only inside the Nova virtualenv (:mod:`tests.differential.nova_venv`); imports nothing
of Cortex. ``python nova_filters_side.py --seed S --requests R --hosts H --candidates C``
writes JSON lines to stdout:

* ``{"kind": "host", "fleet": fleet host}``: a drawn compute node as a Cortex fleet-file host
  (inventories with usage, ``hypervisor_type``/``_version``, ``cpu_info``, ``host_ip``,
  instances with their project and states, and ``supported_instances`` unless they are
  what libvirt reports for the node's architecture, which Cortex then derives). Nova's
  compute node ``stats`` count the instances as nova-compute does. Nova's ``HostState``
  is built from the same facts through ``HostState.update(compute=ComputeNode(...))``,
  as the host manager does.
* ``{"kind": "request", "id": n, "specs", "image", "intent", "body": hook body,
  "nova": {host: true|false|"raises"}, "why": {host: [capabilities, image]}}``: both
  filters through ``BaseHostFilter._filter_one`` (so ``RUN_ON_REBUILD`` holds);
  ``"raises"`` where a Nova filter raised instead of answering (the exception's type in
  ``why``).

Requests Nova's API refuses (``build_spec`` raises) are drawn again.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import uuid

from nova import objects

objects.register_all()

from nova import exception  # noqa: E402
from nova.scheduler import host_manager  # noqa: E402
from nova.scheduler.filters import compute_capabilities_filter, image_props_filter  # noqa: E402
from nova_side import body_of, build_spec, configure  # noqa: E402

FEATURES = ("avx", "avx2", "avx512f", "avx512vnni", "aes", "vmx", "svm", "sse4_2", "pcid",
            "sve", "sve2", "amx_tile")
PROJECTS = ("pa", "pb", "pc")
STATES = (("active", None), ("active", None), ("active", "image_snapshot"),
          ("building", "spawning"), ("stopped", None), ("active", "rebuilding"))
CPUS = (("x86_64", "Intel", "Icelake-Server"), ("x86_64", "Intel", "SapphireRapids"),
        ("x86_64", "AMD", "EPYC-Milan"), ("aarch64", "ARM", "Neoverse-V2"))


def libvirt_instances(arch: str) -> list[list[str]]:
    """What libvirt reports for a host of ``arch`` running KVM (x86_64 also runs i686)."""
    guests = ("x86_64", "i686") if arch == "x86_64" else (arch,)
    return [[g, d, "hvm"] for g in guests for d in ("kvm", "qemu")]


def make_host(rng: random.Random, index: int) -> dict:
    """One compute node's facts as a Cortex fleet host (see the module doc)."""
    name = f"c{index:03d}"
    vmware = rng.random() < 0.12
    arch, vendor, model = rng.choice(CPUS[:3] if vmware else CPUS)
    sockets, cores, threads = rng.choice(((1, 16, 2), (2, 16, 2), (2, 32, 2), (1, 64, 1)))
    info = {"arch": arch, "model": model, "vendor": vendor,
            "topology": {"cells": sockets, "sockets": sockets, "cores": cores,
                         "threads": threads}}
    if rng.random() < 0.3:
        info["maxphysaddr"] = {"mode": "passthrough", "bits": rng.choice((39, 46, 52))}
    pool = [f for f in FEATURES if (f.startswith("sve") == (arch == "aarch64"))]
    info["features"] = rng.sample(pool, rng.randint(1, len(pool)))
    if vmware:
        kind, version = "VMware vCenter Server", rng.choice((7000003, 8000002))
        supported = [["x86_64", "vmware", "hvm"], ["i686", "vmware", "hvm"]]
    else:
        kind, version = "QEMU", rng.choice((6002000, 8002002, 9000000, 9001000))
        supported = libvirt_instances(arch)
        if rng.random() < 0.15:
            supported = supported + [["aarch64", "qemu", "hvm"]]  # an emulator installed
    if rng.random() < 0.06:
        supported = []
    vcpus = rng.choice((32, 64, 128))
    memory = rng.choice((262144, 524288))
    disk = rng.choice((1000, 4000))
    host = {"host": name, "uuid": str(uuid.UUID(int=index + 1)),
            "hypervisor_type": kind, "hypervisor_version": version, "cpu_arch": arch,
            "cpu_info": info, "host_ip": f"10.0.{index // 200}.{index % 200 + 1}",
            "inventories": {
                "VCPU": {"total": vcpus, "used": rng.choice((0, 8, 40)),
                         "allocation_ratio": rng.choice((1.0, 4.0, 16.0))},
                "MEMORY_MB": {"total": memory, "reserved": rng.choice((0, 4096)),
                              "used": rng.choice((0, 65536, 200000)),
                              "allocation_ratio": rng.choice((1.0, 1.5))},
                "DISK_GB": {"total": disk, "reserved": rng.choice((0, 50)),
                            "used": rng.choice((0, 500)), "allocation_ratio": 1.0}}}
    if kind != "QEMU" or supported != libvirt_instances(arch):
        host["supported_instances"] = supported
    host["instances"] = [
        {"uuid": str(uuid.UUID(int=(index + 1) * 100 + k)), "project_id": rng.choice(PROJECTS),
         "vm_state": vm, "task_state": task}
        for k, (vm, task) in enumerate(rng.choices(STATES, k=rng.choice((0, 1, 2, 4))))]
    return host


def stats_of(host: dict) -> dict[str, str]:
    """The compute node's ``stats`` as nova-compute's Stats counts the host's instances."""
    stats: dict[str, int] = {"num_instances": len(host["instances"])}
    io_states = ("resize_migrating", "rebuilding", "resize_prep", "image_snapshot",
                 "image_backup", "rescuing", "unshelving")
    for i in host["instances"]:
        for key in (f"num_vm_{i['vm_state']}", f"num_task_{i['task_state']}",
                    f"num_proj_{i['project_id']}"):
            stats[key] = stats.get(key, 0) + 1
    stats["io_workload"] = sum(stats.get(f"num_task_{t}", 0) for t in io_states) + stats.get(
        "num_vm_building", 0)
    stats["failed_builds"] = 0
    return {k: str(v) for k, v in stats.items()}


def host_state(host: dict) -> host_manager.HostState:
    """Nova's HostState of a fleet host, through ``update(compute=ComputeNode)``."""
    inv = host["inventories"]
    vcpu, ram, disk = inv["VCPU"], inv["MEMORY_MB"], inv["DISK_GB"]
    supported = host.get("supported_instances", libvirt_instances(host["cpu_arch"]))
    disk_used = disk["reserved"] + disk["used"]
    compute = objects.ComputeNode(
        uuid=host["uuid"], host=host["host"], hypervisor_hostname=host["host"],
        vcpus=vcpu["total"], vcpus_used=vcpu["used"], memory_mb=ram["total"],
        memory_mb_used=ram["reserved"] + ram["used"],
        free_ram_mb=ram["total"] - ram["reserved"] - ram["used"], local_gb=disk["total"],
        local_gb_used=disk_used, free_disk_gb=disk["total"] - disk_used,
        disk_available_least=None, hypervisor_type=host["hypervisor_type"],
        hypervisor_version=host["hypervisor_version"], host_ip=host["host_ip"],
        cpu_info=json.dumps(host["cpu_info"]), numa_topology=None, pci_device_pools=None,
        supported_hv_specs=[objects.HVSpec.from_list(s) for s in supported],
        stats=stats_of(host), metrics="[]", updated_at=None,
        cpu_allocation_ratio=vcpu["allocation_ratio"],
        ram_allocation_ratio=ram["allocation_ratio"],
        disk_allocation_ratio=disk["allocation_ratio"])
    state = host_manager.HostState(host["host"], host["host"], uuid.uuid4().hex)
    state.update(compute=compute)
    return state


#: (capability key, requirements drawn for it). Printed values are matched, so list and
#: dict capabilities print as Python does; numeric operators on text make Nova raise.
SPECS = (
    ("capabilities:hypervisor_type", ("QEMU", "qemu", "s== QEMU", "<in> QEM", "s!= QEMU",
                                      "VMware vCenter Server", "<or> kvm <or> QEMU")),
    ("capabilities:hypervisor_version", (">= 8000000", "= 9000000", "== 8002002",
                                         "<= 7000003", "8002002", "s>= 8", "!= 9000000")),
    ("capabilities:cpu_info:arch", ("x86_64", "aarch64", "X86_64", "<or> aarch64 <or> x86_64")),
    ("capabilities:cpu_info:vendor", ("Intel", "AMD", "intel", "<in> Int", "s!= ARM")),
    ("capabilities:cpu_info:model", ("<in> Icelake", "SapphireRapids", "s< F")),
    ("capabilities:cpu_info:features", ("avx2", "<in> avx512", "<in> sve", "<in> 'sve'",
                                        "<all-in> avx2 aes", "<all-in> avx512f vmx", "sve2",
                                        "['sve']", "<in> amx")),
    ("capabilities:cpu_info:topology:cores", (">= 32", "16", "== 64", "<= 16")),
    ("capabilities:cpu_info:topology:sockets", ("2", ">= 2")),
    ("capabilities:cpu_info:topology", ("<in> 'threads': 2", "<in> 'sockets': 1, 'cores'")),
    ("capabilities:cpu_info", ("<in> Intel", '<in> "vendor": "AMD"')),
    ("capabilities:cpu_info:maxphysaddr:bits", (">= 46", "52")),
    ("capabilities:host_ip", ("10.0.0.5", "<in> 10.0.0.", "s>= 10.0.0.5")),
    ("capabilities:vcpus_total", (">= 64", "= 128", "32")),
    ("capabilities:vcpus_used", ("<= 8", "== 0")),
    ("capabilities:free_ram_mb", (">= 200000", "<= 100000")),
    ("capabilities:total_usable_ram_mb", (">= 500000", "262144")),
    ("capabilities:free_disk_mb", (">= 1000000",)),
    ("capabilities:cpu_allocation_ratio", ("4.0", "== 16", "16")),
    ("capabilities:ram_allocation_ratio", ("1.5",)),
    ("capabilities:supported_instances", ("<in> aarch64", "<in> 'i686', 'kvm'")),
    ("capabilities:hypervisor_hostname", ("<in> c0",)),
    ("capabilities:gpu_model", ("H100",)),
    ("capabilities:num_instances", (">= 2", "0", "<= 1")),
    ("capabilities:num_vm_active", (">= 1", "2")),
    ("capabilities:num_proj_pa", (">= 1",)),
    ("capabilities:num_task_image_snapshot", ("1",)),
    ("capabilities:io_workload", ("0", ">= 1")),
    ("capabilities:num_io_ops", ("<= 1",)),
    ("num_instances", ("<= 2",)),
    ("num_task_None", (">= 1",)),
    ("hypervisor_type", ("QEMU", "qemu")),
    ("vcpus_total", (">= 64",)),
    ("flavor_tag", ("gold",)),
    ("aggregate_instance_extra_specs:ssd", ("true",)),
    ("hw:maxphysaddr_bits", ("40", "48")),
)
IMAGE = {
    "hw_architecture": (None,) * 6 + ("x86_64", "x86_64", "i686", "aarch64", "ppc64le"),
    "img_hv_type": (None,) * 6 + ("kvm", "kvm", "qemu", "vmware", "xen"),
    "hw_vm_mode": (None,) * 6 + ("hvm", "hvm", "xen", "exe"),
    "img_hv_requested_version": (None, None, None, ">=8.0", ">=9", "<8.2.2", "==8.2.2",
                                 ">=7.0, <9", "==9.1"),
}


def make_request(rng: random.Random) -> tuple[dict, dict, str]:
    """``(extra specs, image properties, intent)`` of one drawn request."""
    specs = {}
    for key, values in rng.sample(SPECS, rng.choice((0, 1, 1, 2, 2, 3))):
        specs[key] = rng.choice(values)
    if rng.random() < 0.03:
        specs["capabilities:cpu_info:vendor"] = "= 1"  # Nova's float() raises on the vendor
    image = {k: v for k, choices in IMAGE.items() if (v := rng.choice(choices)) is not None}
    if rng.random() < 0.05:
        image["hw_maxphysaddr_bits"] = rng.choice((40, 48))
    intent = "rebuild" if rng.random() < 0.1 else "create"
    return specs, image, intent


def verdict(state: host_manager.HostState, spec) -> tuple[bool | str, list]:
    """Both filters through ``_filter_one``: the verdict and each filter's answer."""
    answers: list = []
    for cls in (compute_capabilities_filter.ComputeCapabilitiesFilter,
                image_props_filter.ImagePropertiesFilter):
        try:
            answers.append(bool(cls()._filter_one(state, spec)))
        except Exception as error:  # noqa: BLE001 - a Nova filter that raises is recorded
            answers.append(type(error).__name__)
    if any(isinstance(a, str) for a in answers):
        return "raises", answers
    return all(answers), answers


def generate(seed: int, requests: int, hosts: int, candidates: int, out) -> None:
    """Write the hosts, then each request with Nova's verdicts, as JSON lines."""
    configure()
    rng = random.Random(seed)
    fleet = [make_host(rng, i) for i in range(hosts)]
    states = {h["host"]: host_state(h) for h in fleet}
    for host in fleet:
        out.write(json.dumps({"kind": "host", "fleet": host}) + "\n")
    made = 0
    while made < requests:
        specs, image, intent = make_request(rng)
        knobs = {"vcpus": 2, "memory_mb": 2048, "intent": intent, "id": made}
        try:
            spec = build_spec(specs, image, knobs)
        except (exception.Invalid, ValueError):
            continue
        chosen = [h["host"] for h in rng.sample(fleet, min(candidates, hosts))]
        if intent == "rebuild":
            chosen = chosen[:1]
            spec.force_hosts, spec.force_nodes = chosen, chosen
        judged = {name: verdict(states[name], spec) for name in chosen}
        out.write(json.dumps({
            "kind": "request", "id": made, "specs": specs, "image": image, "intent": intent,
            "body": body_of(spec, intent, chosen),
            "nova": {n: v for n, (v, _) in judged.items()},
            "why": {n: w for n, (_, w) in judged.items()}}) + "\n")
        made += 1


def main() -> None:
    """Command line: ``--seed --requests --hosts --candidates``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--hosts", type=int, default=80)
    parser.add_argument("--candidates", type=int, default=40)
    args = parser.parse_args()
    generate(args.seed, args.requests, args.hosts, args.candidates, sys.stdout)


if __name__ == "__main__":
    main()
