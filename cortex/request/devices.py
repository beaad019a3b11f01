"""What devices (GPUs, PCI functions, vGPUs) a Nova request asks for.

Sources, in Nova's terms:

* the RequestSpec's ``pci_requests`` (InstancePCIRequest: ``count``, ``spec`` list of
  any-of property dicts, ``alias_name``, ``numa_policy``);
* else the flavor's ``pci_passthrough:alias`` (``a100:2,l40s:1``) resolved with PCI
  aliases configured in Cortex, the same JSON as Nova's ``[pci] alias``
  (``nova/pci/request.py``): ``name``, ``vendor_id``, ``product_id``, ``device_type``
  (kept as ``dev_type``), ``numa_policy`` (default ``legacy``), other keys as spec;
  the flavor's ``hw:pci_numa_affinity_policy`` (image ``hw_pci_numa_affinity_policy``)
  overrides the alias's policy;
* Placement request groups of the flavor: ``resources[N]:VGPU``, ``resources[N]:PGPU``
  and ``resources[N]:CUSTOM_PCI_<VENDOR>_<PRODUCT>`` with the group's ``trait[N]:*``;
* Cyborg's ``accel:device_profile``, resolved with device profiles configured in
  Cortex (Cyborg's ``[{"name", "groups": [{"resources:PGPU": "1", "trait:...":
  "required"}]}]``).

Traits Cortex understands on a group: ``CUSTOM_<...>_<N>G_<M>GB`` names a MIG profile
(``CUSTOM_NVIDIA_A100_3G_40GB`` -> ``3g.40gb``); Cyborg's ``CUSTOM_GPU_PRODUCT_ID_<ID>``
and ``CUSTOM_GPU_<VENDOR>`` (NVIDIA, AMD, INTEL) name the device. Other traits live on
Placement providers and are Placement's to check.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from cortex.request.base import BadRequest, frozen

NUMA_POLICIES = ("required", "legacy", "preferred", "socket")
VENDORS = {"NVIDIA": "10de", "AMD": "1002", "INTEL": "8086"}
_GROUP_KEY = re.compile(r"^(?P<kind>resources|trait)(?P<suffix>\d*|_[\w-]+):(?P<name>[A-Z0-9_]+)$")
_CUSTOM_PCI = re.compile(r"^CUSTOM_PCI_(?P<vendor>[0-9A-F]{4})_(?P<product>[0-9A-F]{4})$")
_MIG_TRAIT = re.compile(r"^CUSTOM_\w*?_(?P<slices>\d+)G_(?P<memory>\d+)GB$")
_PRODUCT_TRAIT = re.compile(r"^CUSTOM_GPU_PRODUCT_ID_(?P<product>[0-9A-F]{4})$")


class CatalogError(ValueError):
    """A configured PCI alias or device profile is invalid; the message says which."""


@dataclass(frozen=True, slots=True)
class PciAlias:
    """One Nova PCI alias: any of ``specs`` matches; ``numa_policy`` defaults to legacy."""

    name: str
    numa_policy: str
    specs: tuple[Mapping[str, str], ...]


@dataclass(frozen=True, slots=True)
class DeviceCatalog:
    """The PCI aliases and Cyborg device profiles configured in Cortex, by name."""

    aliases: Mapping[str, PciAlias] = field(default_factory=lambda: MappingProxyType({}))
    profiles: Mapping[str, tuple[Mapping[str, str], ...]] = field(
        default_factory=lambda: MappingProxyType({}))

    @classmethod
    def from_json(cls, aliases: str = "", profiles: str = "") -> DeviceCatalog:
        """Parse ``[gpu] pci_alias`` and ``[gpu] device_profiles``; CatalogError if invalid."""
        return cls(MappingProxyType(parse_pci_aliases(aliases)),
                   MappingProxyType(parse_device_profiles(profiles)))


def _json_list(text: str, what: str) -> list[Any]:
    """A JSON object or list of objects; CatalogError otherwise."""
    if not text or not text.strip():
        return []
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise CatalogError(f"{what}: not JSON: {exc}") from None
    value = value if isinstance(value, list) else [value]
    if not all(isinstance(v, dict) for v in value):
        raise CatalogError(f"{what}: expected a JSON object or a list of objects")
    return value


def parse_pci_aliases(text: str) -> dict[str, PciAlias]:
    """Nova's ``[pci] alias`` rules: entries of one name join as any-of specs.

    Entries sharing a name must agree on ``numa_policy`` and ``device_type`` (Nova's
    ``PciInvalidAlias``); vendor and product ids are 4 hex digits, compared lower-case.
    """
    aliases: dict[str, PciAlias] = {}
    for entry in _json_list(text, "pci_alias"):
        spec = {k: str(v) for k, v in entry.items()}
        name = spec.pop("name", "").strip()
        if not name:
            raise CatalogError("pci_alias: an alias without a name")
        policy = spec.pop("numa_policy", None) or "legacy"
        if policy not in NUMA_POLICIES:
            raise CatalogError(f"pci_alias {name}: numa_policy {policy!r} is not one of "
                               f"{', '.join(NUMA_POLICIES)}")
        if "device_type" in spec:
            spec["dev_type"] = spec.pop("device_type")
        for key in ("vendor_id", "product_id"):
            if key in spec:
                if not re.fullmatch(r"[0-9a-fA-F]{4}", spec[key]):
                    raise CatalogError(f"pci_alias {name}: {key} {spec[key]!r} is not 4 hex digits")
                spec[key] = spec[key].lower()
        known = aliases.get(name)
        if known and (known.numa_policy != policy
                      or known.specs[0].get("dev_type") != spec.get("dev_type")):
            raise CatalogError(f"pci_alias {name}: entries disagree on numa_policy or device_type")
        specs = (known.specs if known else ()) + (frozen(spec),)
        aliases[name] = PciAlias(name, policy, specs)
    return aliases


def parse_device_profiles(text: str) -> dict[str, tuple[Mapping[str, str], ...]]:
    """Cyborg device profiles ``[{"name", "groups": [{key: value}]}]`` by name."""
    profiles = {}
    for entry in _json_list(text, "device_profiles"):
        name, groups = entry.get("name"), entry.get("groups")
        if not name or not isinstance(groups, list) or not all(isinstance(g, dict)
                                                               for g in groups):
            raise CatalogError("device_profiles: each profile needs a name and a list of groups")
        profiles[name] = tuple(frozen({k: str(v) for k, v in g.items()}) for g in groups)
    return profiles


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """``count`` devices of one kind that the request needs on the host.

    ``kind``: ``pci`` (a whole PCI function: GPU passthrough, PGPU, CUSTOM_PCI_*) or
    ``vgpu``. ``specs``: any-of property dicts (``vendor_id``, ``product_id``,
    ``dev_type``...), empty for any GPU. ``numa_policy``: Nova's PCI NUMA affinity
    policy for InstancePCIRequests, None for Placement request groups (no affinity).
    ``mig_profile``: the MIG profile a vGPU must be backed by (None: any).
    ``source`` and ``name`` say where it came from, for reasons.
    """

    kind: str
    count: int
    specs: tuple[Mapping[str, str], ...] = ()
    numa_policy: str | None = None
    mig_profile: str | None = None
    source: str = "pci_requests"
    name: str | None = None


def pci_policy_constraint(extra_specs: Mapping[str, str],
                          image_properties: Mapping[str, Any]) -> str | None:
    """``hw:pci_numa_affinity_policy`` (flavor, else image); BadRequest for an unknown value."""
    policy = extra_specs.get("hw:pci_numa_affinity_policy") or image_properties.get(
        "hw_pci_numa_affinity_policy")
    if policy and policy not in NUMA_POLICIES:
        raise BadRequest(f"hw:pci_numa_affinity_policy={policy!r} is not one of "
                         f"{', '.join(NUMA_POLICIES)}")
    return policy or None


def device_requests(pci_requests: tuple[Any, ...], extra_specs: Mapping[str, str],
                    image_properties: Mapping[str, Any], catalog: DeviceCatalog | None
                    ) -> tuple[tuple[DeviceRequest, ...], tuple[str, ...]]:
    """``(requests, unresolved)``: the request's device demand, and what Cortex cannot resolve.

    ``pci_requests`` are the parsed InstancePCIRequests (used when not empty, else the
    alias extra spec); ``unresolved`` names aliases or device profiles not configured
    in Cortex, whose demand is therefore unknown.
    """
    catalog = catalog or DeviceCatalog()
    unresolved: list[str] = []
    if pci_requests:
        found = [DeviceRequest("pci", r.count, tuple(r.spec), r.numa_policy or "legacy",
                               source="pci_requests", name=r.alias_name) for r in pci_requests]
    else:
        found = _from_alias(extra_specs, image_properties, catalog, unresolved)
    found += _from_groups(extra_specs, "resources")
    profile = extra_specs.get("accel:device_profile")
    if profile:
        groups = catalog.profiles.get(profile)
        if groups is None:
            unresolved.append(f"accel:device_profile {profile}")
        for group in groups or ():
            found += _from_groups(group, "accel:device_profile", profile)
    return tuple(found), tuple(unresolved)


def _from_alias(extra_specs: Mapping[str, str], image_properties: Mapping[str, Any],
                catalog: DeviceCatalog, unresolved: list[str]) -> list[DeviceRequest]:
    """Nova's ``_translate_alias_to_requests`` for ``pci_passthrough:alias``."""
    text = extra_specs.get("pci_passthrough:alias")
    if not text:
        return []
    policy = pci_policy_constraint(extra_specs, image_properties)
    found = []
    for item in text.split(","):
        name, _, count = item.partition(":")
        name = name.strip()
        if not count.strip().isdigit() or int(count) < 1:
            raise BadRequest(f"pci_passthrough:alias {item!r}: expected <alias>:<count>")
        alias = catalog.aliases.get(name)
        if alias is None:
            unresolved.append(f"pci alias {name}")
            continue
        found.append(DeviceRequest("pci", int(count), alias.specs, policy or alias.numa_policy,
                                   source="pci_passthrough:alias", name=name))
    return found


def _from_groups(specs: Mapping[str, str], source: str, name: str | None = None
                 ) -> list[DeviceRequest]:
    """Device request groups among ``resources[N]:RC`` / ``trait[N]:T`` keys."""
    groups: dict[str, dict[str, Any]] = {}
    for key, value in specs.items():
        match = _GROUP_KEY.match(key)
        if not match:
            continue
        group = groups.setdefault(match["suffix"], {"resources": {}, "traits": set()})
        if match["kind"] == "resources":
            if not str(value).strip().isdigit():
                raise BadRequest(f"{source} {key}={value!r}: the amount must be an integer")
            group["resources"][match["name"]] = int(value)
        elif value == "required":
            group["traits"].add(match["name"])
    found = []
    for group in groups.values():
        found += _group_requests(group["resources"], group["traits"], source, name)
    return found


def _group_requests(resources: Mapping[str, int], traits: set[str], source: str,
                    name: str | None) -> list[DeviceRequest]:
    """The device requests of one request group."""
    found = []
    for rc, amount in resources.items():
        if amount < 1:
            continue
        if rc == "VGPU":
            profile = next((f"{m['slices']}g.{m['memory']}gb" for m in map(
                _MIG_TRAIT.match, sorted(traits)) if m), None)
            found.append(DeviceRequest("vgpu", amount, mig_profile=profile, source=source,
                                       name=name or rc))
        elif rc == "PGPU":
            found.append(DeviceRequest("pci", amount, _pgpu_specs(traits), source=source,
                                       name=name or rc))
        elif (pci := _CUSTOM_PCI.match(rc)) is not None:
            spec = frozen({"vendor_id": pci["vendor"].lower(),
                           "product_id": pci["product"].lower()})
            found.append(DeviceRequest("pci", amount, (spec,), source=source, name=name or rc))
    return found


def _pgpu_specs(traits: set[str]) -> tuple[Mapping[str, str], ...]:
    """Specs of a PGPU group from Cyborg's GPU traits (empty: any GPU)."""
    spec = {}
    for trait in traits:
        product = _PRODUCT_TRAIT.match(trait)
        if product:
            spec["product_id"] = product["product"].lower()
        elif trait.startswith("CUSTOM_GPU_") and trait[11:] in VENDORS:
            spec["vendor_id"] = VENDORS[trait[11:]]
    return (frozen(spec),) if spec else ()
