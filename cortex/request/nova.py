"""NovaRequest: Nova's RequestSpec primitive, parsed once into typed, read-only fields."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cortex.request.base import (
    EMPTY,
    BadRequest,
    CandidateList,
    context_ids,
    frozen,
    hashable,
    parse_candidates,
    strings,
    unwrap,
)
from cortex.request.devices import DeviceCatalog, DeviceRequest, device_requests
from cortex.request.groups import NetworkPlacement, network_placement
from cortex.request.numa import numa_constraints

INTENTS = ("create", "rebuild", "resize", "live_migrate", "evacuate")
_RESOURCES_RE = re.compile(r"^resources(\d*|_[\w-]+):(?P<rc>[A-Z0-9_]+)$")
_TRAIT_RE = re.compile(r"^trait(\d*|_[\w-]+):(?P<trait>[A-Z0-9_]+)$")


@dataclass(frozen=True, slots=True)
class Flavor:
    """The flavor: sizes in Nova's units (MiB of memory, GiB of disk, MiB of swap)."""

    name: str | None
    vcpus: int
    memory_mb: int
    root_gb: int
    ephemeral_gb: int
    swap: int
    extra_specs: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class NumaCellRequest:
    """A guest NUMA cell (Nova's InstanceNUMACell): CPU ids, memory MiB, page size KiB."""

    id: int
    cpuset: frozenset[int]
    pcpuset: frozenset[int]
    memory: int
    pagesize: int | None
    cpu_policy: str | None
    cpu_thread_policy: str | None


@dataclass(frozen=True, slots=True)
class PciRequest:
    """One InstancePCIRequest: ``count`` devices matching any of ``spec``."""

    count: int
    spec: tuple[Mapping[str, Any], ...]
    alias_name: str | None
    numa_policy: str | None
    request_id: str | None


@dataclass(frozen=True, slots=True)
class ServerGroup:
    """The instance's server group: policy, hosts already used, members, rules."""

    uuid: str | None
    policy: str | None
    hosts: tuple[str, ...]
    members: tuple[str, ...]
    rules: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Destination:
    """RequestSpec.requested_destination: a host/node, or aggregates.

    ``aggregates`` follows Nova: each entry is a comma-joined list of aggregate
    uuids meaning "any of these", and all entries must hold (AND of ORs).
    ``forbidden_aggregates`` (Nova's Destination 1.3) are uuids the host must be in none of.
    """

    host: str | None
    node: str | None
    aggregates: tuple[tuple[str, ...], ...]
    forbidden_aggregates: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class NovaRequest:
    """A Nova scheduling request (``POST /scheduler/nova/external``).

    Built by :meth:`from_body` from a body already validated against the OpenAPI
    schema. ``resources`` are the amounts per resource class that Placement would
    be asked for (see :func:`requested_resources`); ``intent`` is the
    ``_nova_check_type`` hint (``create`` when absent), believed only where the body's
    flags and the spec agree (:func:`intent_claims`); ``disbelieved_intent`` names a
    claim that was not believed (the call then runs as a create). ``image_id``: the
    image's id (IsolatedHostsFilter's ``isolated_images`` name images by id).

    Derived for the topology filters: ``guest_numa`` is the guest's NUMA cells (the
    spec's ``numa_topology`` when it has cells, else derived from the flavor and image
    as Nova does, :func:`cortex.request.numa.numa_constraints`), with
    ``emulator_threads_policy``; ``device_requests`` is the device demand
    (:func:`cortex.request.devices.device_requests`) and ``unresolved_devices`` names
    aliases or device profiles Cortex has no definition of; ``network`` is the group
    placement the request asks for (:func:`cortex.request.groups.network_placement`).

    The one answer to what devices the request asks for, used by every rule:
    ``pci_devices`` (whole devices: passthrough GPUs, PGPU, ``CUSTOM_PCI_*``) and
    ``vgpu_devices`` (vGPUs, MIG instances); ``gpu_count``, the whole GPUs over all PCI
    requests, which is what nova-compute claims (``PciDeviceStats.consume_requests``
    takes every request's count); ``asks_for_devices``, any device request or an alias
    or device profile Cortex cannot resolve (the pipeline choice's ``gpu`` condition).
    """

    candidates: CandidateList
    flavor: Flavor
    image_properties: Mapping[str, Any]
    numa_cells: tuple[NumaCellRequest, ...]
    pci_requests: tuple[PciRequest, ...]
    scheduler_hints: Mapping[str, tuple[str, ...]]
    intent: str
    server_group: ServerGroup | None
    ignore_hosts: tuple[str, ...]
    force_hosts: tuple[str, ...]
    force_nodes: tuple[str, ...]
    requested_destination: Destination | None
    num_instances: int
    root_required: frozenset[str]
    root_forbidden: frozenset[str]
    required_traits: frozenset[str]
    forbidden_traits: frozenset[str]
    resources: Mapping[str, int]
    project_id: str | None
    user_id: str | None
    availability_zone: str | None
    instance_uuid: str | None
    is_bfv: bool
    rebuild: bool
    resize: bool
    live: bool
    vmware: bool
    request_id: str | None = None
    global_request_id: str | None = None
    pipeline: str | None = None
    guest_numa: tuple[NumaCellRequest, ...] = ()
    emulator_threads_policy: str | None = None
    device_requests: tuple[DeviceRequest, ...] = ()
    unresolved_devices: tuple[str, ...] = ()
    network: NetworkPlacement = NetworkPlacement(None, 1, None, None, False, None)
    disbelieved_intent: str | None = None
    service: str = "nova"
    image_id: str | None = None
    pci_devices: tuple[DeviceRequest, ...] = field(init=False, repr=False, compare=False)
    vgpu_devices: tuple[DeviceRequest, ...] = field(init=False, repr=False, compare=False)
    gpu_count: int = field(init=False, repr=False, compare=False)
    asks_for_devices: bool = field(init=False, repr=False, compare=False)
    topology_key: tuple = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """The device demand by kind, whole GPUs asked, whether any device is asked."""
        pci = tuple(r for r in self.device_requests if r.kind == "pci")
        object.__setattr__(self, "pci_devices", pci)
        object.__setattr__(self, "vgpu_devices",
                           tuple(r for r in self.device_requests if r.kind == "vgpu"))
        object.__setattr__(self, "gpu_count", sum(r.count for r in pci))
        object.__setattr__(self, "asks_for_devices",
                           bool(self.device_requests or self.unresolved_devices))
        object.__setattr__(self, "topology_key", self._topology_key())

    def _topology_key(self) -> tuple:
        """Everything of the request that the GPU, PCI and NUMA rules read, hashable.

        The guest's NUMA cells and emulator threads policy, the device requests (names
        included: reasons quote them), the flavor's vCPUs and memory, and the CPU and
        thread policies of the flavor and image. The memo key of the topology plugins
        (:meth:`cortex.plugins.base.Plugin.memo_key`): two requests with equal keys get
        equal answers from them on every host.
        """
        specs, image = self.flavor.extra_specs, self.image_properties
        return (self.guest_numa, self.emulator_threads_policy,
                hashable(tuple((r.kind, r.count, r.specs, r.numa_policy, r.mig_profile,
                                r.source, r.name) for r in self.device_requests)),
                self.flavor.vcpus, self.flavor.memory_mb,
                hashable([specs.get(k) for k in ("hw:cpu_policy", "hw:cpu_thread_policy")]
                         + [image.get(k) for k in ("hw_cpu_policy", "hw_cpu_thread_policy")]))

    @property
    def gpu_products(self) -> frozenset[str]:
        """PCI product ids (lower case) the request's devices name; empty: any GPU."""
        return frozenset(str(spec["product_id"]).lower() for r in self.device_requests
                         for spec in r.specs if spec.get("product_id"))

    @property
    def resource_id(self) -> str | None:
        """The instance uuid, the resource this decision is about."""
        return self.instance_uuid

    @property
    def cpu_policy(self) -> str | None:
        """``hw:cpu_policy`` of the flavor, else of the image (``hw_cpu_policy``)."""
        return self.flavor.extra_specs.get("hw:cpu_policy") or self.image_properties.get(
            "hw_cpu_policy")

    @classmethod
    def from_body(cls, body: Mapping[str, Any],
                  devices: DeviceCatalog | None = None, service: str = "nova") -> NovaRequest:
        """Parse a validated body; raises BadRequest for what the schema cannot express.

        ``devices`` resolves ``pci_passthrough:alias`` and ``accel:device_profile`` (the
        ``[gpu]`` options); without it they stay unresolved. ``service``: ``kubernetes``
        for a pod the extender put in Nova's terms (:mod:`cortex.request.kubernetes`).
        """
        spec = unwrap(body["spec"])
        flavor = _flavor(unwrap(spec.get("flavor")))
        image = unwrap(spec.get("image"))
        image_properties = unwrap(image.get("properties"))
        numa_topology = unwrap(spec.get("numa_topology"))
        numa_cells = _numa_cells(numa_topology)
        emulator = numa_topology.get("emulator_threads_policy")
        guest_numa = numa_cells
        if not numa_cells:
            guest_numa, emulator = _derived_numa(flavor, image_properties)
        pci_requests = _pci_requests(unwrap(spec.get("pci_requests")))
        wanted, unresolved = device_requests(pci_requests, flavor.extra_specs, image_properties,
                                             devices)
        hints = {k: strings(v) for k, v in (spec.get("scheduler_hints") or {}).items()}
        intent, disbelieved = intent_claims(spec, body)
        params = unwrap(spec.get("request_level_params"))
        required, forbidden = _traits(flavor.extra_specs)
        request_id, global_request_id, project = context_ids(body)
        is_bfv = bool(spec.get("is_bfv"))
        group = _server_group(unwrap(spec.get("instance_group")))
        num_instances = max(1, int(spec.get("num_instances") or 1))
        return cls(
            candidates=parse_candidates(body),
            flavor=flavor,
            image_properties=frozen(image_properties),
            numa_cells=numa_cells,
            pci_requests=pci_requests,
            scheduler_hints=frozen(hints),
            intent=intent,
            disbelieved_intent=disbelieved,
            server_group=group,
            ignore_hosts=strings(spec.get("ignore_hosts")),
            force_hosts=strings(spec.get("force_hosts")),
            force_nodes=strings(spec.get("force_nodes")),
            requested_destination=_destination(unwrap(spec.get("requested_destination"))),
            num_instances=num_instances,
            root_required=frozenset(strings(params.get("root_required"))),
            root_forbidden=frozenset(strings(params.get("root_forbidden"))),
            required_traits=required,
            forbidden_traits=forbidden,
            resources=frozen(requested_resources(flavor, image_properties, is_bfv)),
            project_id=spec.get("project_id") or project,
            user_id=spec.get("user_id"),
            availability_zone=spec.get("availability_zone"),
            instance_uuid=spec.get("instance_uuid"),
            is_bfv=is_bfv,
            rebuild=bool(body.get("rebuild")),
            resize=bool(body.get("resize")),
            live=bool(body.get("live")),
            vmware=bool(body.get("vmware")),
            image_id=image.get("id"),
            request_id=request_id,
            global_request_id=global_request_id,
            pipeline=body.get("pipeline"),
            guest_numa=guest_numa,
            emulator_threads_policy=emulator,
            device_requests=wanted,
            unresolved_devices=unresolved,
            network=network_placement(hints, num_instances, group, request_id,
                                      global_request_id),
            service=service,
        )


def _flavor(data: Mapping[str, Any]) -> Flavor:
    """Flavor from its unwrapped primitive; absent sizes are 0."""
    return Flavor(
        name=data.get("name"),
        vcpus=int(data.get("vcpus") or 0),
        memory_mb=int(data.get("memory_mb") or 0),
        root_gb=int(data.get("root_gb") or 0),
        ephemeral_gb=int(data.get("ephemeral_gb") or 0),
        swap=int(data.get("swap") or 0),
        extra_specs=frozen({k: str(v) for k, v in (data.get("extra_specs") or {}).items()}),
    )


#: The body flag that must be set (True) for a claimed intent to be believed; evacuate is
#: a move that SAP's hook flags as none of them, so it is believed with every flag clear.
_INTENT_FLAGS = {"rebuild": "rebuild", "resize": "resize", "live_migrate": "live"}


def intent_claims(spec: Mapping[str, Any], body: Mapping[str, Any]
                  ) -> tuple[str, str | None]:
    """``(intent, disbelieved claim or None)`` of a Nova call.

    The intent is the ``_nova_check_type`` hint (older callers without it: the legacy
    ``live``/``resize``/``rebuild`` flags), believed only when the body's own flags and
    the spec agree with it; otherwise the call is a create and the claim is returned so
    the caller can log and count it. Why: on a Nova without the fix for CVE-2026-46448 a
    user may send ``_nova_check_type`` at create (Nova 34 strips user ``_nova*`` hints in
    ``nova/compute/api.py API.create``), and a believed ``rebuild`` skips the filters.
    Agreement, from Nova 34's own callers: ``rebuild`` needs ``rebuild: true`` and
    ``force_hosts`` set (``API.rebuild`` pins the instance's host and node); ``resize``
    needs ``resize: true``; ``live_migrate`` needs ``live: true``; ``evacuate`` needs
    every flag clear; a flag set without the hint of its intent is disbelieved too.
    """
    hints = spec.get("scheduler_hints") or {}
    check = strings(hints.get("_nova_check_type"))
    flags = {name for name in ("rebuild", "resize", "live") if body.get(name)}
    claimed = check[0] if check and check[0] in INTENTS else None
    if claimed is None:
        legacy = [i for i, flag in _INTENT_FLAGS.items() if flag in flags]
        if not legacy:
            return "create", None
        claimed = legacy[-1]
        if legacy != [claimed] or (claimed == "rebuild" and not strings(spec.get("force_hosts"))):
            return "create", claimed
        return claimed, None
    wanted = {_INTENT_FLAGS[claimed]} if claimed in _INTENT_FLAGS else set()
    if claimed == "create" or flags != wanted:
        return "create", None if claimed == "create" and not flags else claimed
    if claimed == "rebuild" and not strings(spec.get("force_hosts")):
        return "create", claimed
    return claimed, None


def _numa_cells(topology: Mapping[str, Any]) -> tuple[NumaCellRequest, ...]:
    """Guest NUMA cells of InstanceNUMATopology (empty without a NUMA topology)."""
    cells = [unwrap(c) for c in topology.get("cells") or ()]
    return tuple(
        NumaCellRequest(
            id=int(c.get("id") or 0),
            cpuset=frozenset(c.get("cpuset") or ()),
            pcpuset=frozenset(c.get("pcpuset") or ()),
            memory=int(c.get("memory") or 0),
            pagesize=c.get("pagesize"),
            cpu_policy=c.get("cpu_policy"),
            cpu_thread_policy=c.get("cpu_thread_policy"),
        ) for c in cells)


def _derived_numa(flavor: Flavor, image_props: Mapping[str, Any]
                  ) -> tuple[tuple[NumaCellRequest, ...], str | None]:
    """Guest NUMA cells Nova would derive from the flavor and image (none: no NUMA)."""
    cells, emulator = numa_constraints(flavor.vcpus, flavor.memory_mb, flavor.extra_specs,
                                       image_props)
    return tuple(NumaCellRequest(**cell) for cell in cells), emulator


def _pci_requests(value: Mapping[str, Any]) -> tuple[PciRequest, ...]:
    """InstancePCIRequests.requests as PciRequest tuples."""
    requests = [unwrap(r) for r in value.get("requests") or ()]
    return tuple(
        PciRequest(
            count=int(r.get("count") or 1),
            spec=tuple(frozen(unwrap(s)) for s in r.get("spec") or ()),
            alias_name=r.get("alias_name"),
            numa_policy=r.get("numa_policy"),
            request_id=r.get("request_id"),
        ) for r in requests)


def _server_group(group: Mapping[str, Any] | None) -> ServerGroup | None:
    """InstanceGroup; the rules arrive as ``rules`` or, from older objects, ``_rules``."""
    if not group:
        return None
    rules = group.get("rules") or group.get("_rules") or {}
    return ServerGroup(
        uuid=group.get("uuid"),
        policy=group.get("policy") or (strings(group.get("policies")) or (None,))[0],
        hosts=strings(group.get("hosts")),
        members=strings(group.get("members")),
        rules=frozen({k: str(v) for k, v in rules.items()}),
    )


def _destination(dest: Mapping[str, Any] | None) -> Destination | None:
    """Destination with aggregates split on commas (Nova's "any of" syntax)."""
    if not dest:
        return None
    aggregates = tuple(tuple(a for a in entry.split(",") if a)
                       for entry in strings(dest.get("aggregates")))
    return Destination(host=dest.get("host"), node=dest.get("node"), aggregates=aggregates,
                       forbidden_aggregates=frozenset(strings(dest.get("forbidden_aggregates"))))


def _traits(extra_specs: Mapping[str, str]) -> tuple[frozenset[str], frozenset[str]]:
    """Required and forbidden traits of ``trait[N]:NAME=required|forbidden`` extra specs."""
    required, forbidden = set(), set()
    for key, value in extra_specs.items():
        match = _TRAIT_RE.match(key)
        if match and value == "required":
            required.add(match["trait"])
        elif match and value == "forbidden":
            forbidden.add(match["trait"])
    return frozenset(required), frozenset(forbidden)


def requested_resources(flavor: Flavor, image_properties: Mapping[str, Any],
                        is_bfv: bool) -> dict[str, int]:
    """Resource amounts Nova asks Placement for, summed over request groups.

    Nova's rules (nova/scheduler/utils.py ``ResourceRequest``/``resources_from_flavor``):
    ``VCPU = vcpus``, ``MEMORY_MB = memory_mb``, ``DISK_GB = root_gb (0 when boot from
    volume) + ephemeral_gb + ceil(swap MiB / 1024)``; ``hw:cpu_policy=dedicated`` (flavor
    or image) turns the vcpus into ``PCPU``; ``resources[N]:RC=amount`` extra specs
    override the flavor's amount for that class (0 removes it).
    """
    disk = (0 if is_bfv else flavor.root_gb) + flavor.ephemeral_gb + math.ceil(flavor.swap / 1024)
    resources = {"VCPU": flavor.vcpus, "MEMORY_MB": flavor.memory_mb, "DISK_GB": disk}
    policy = flavor.extra_specs.get("hw:cpu_policy") or image_properties.get("hw_cpu_policy")
    if policy == "dedicated":
        resources["PCPU"] = resources.pop("VCPU")
    overrides: dict[str, int] = {}
    for key, value in flavor.extra_specs.items():
        match = _RESOURCES_RE.match(key)
        if match:
            if not value.strip().isdigit():
                raise BadRequest(f"extra spec {key}={value!r}: the amount must be an integer")
            overrides[match["rc"]] = overrides.get(match["rc"], 0) + int(value)
    resources.update(overrides)
    return {rc: amount for rc, amount in resources.items() if amount > 0}


__all__ = ["EMPTY", "Destination", "DeviceCatalog", "DeviceRequest", "Flavor",
           "NetworkPlacement", "NovaRequest", "NumaCellRequest", "PciRequest", "ServerGroup",
           "requested_resources"]
