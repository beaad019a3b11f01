"""Nova's ImagePropertiesFilter rule: whether a node can run the image's guest.

Source: ``nova/scheduler/filters/image_props_filter.py``, ``nova/objects/fields.py``
(``Architecture``/``HVType``/``VMMode.canonicalize``) and oslo.utils'
``VersionPredicate`` of Nova 34 (read for the facts, not copied). The rule:

* The image asks for ``hw_architecture`` (or the configured default architecture),
  ``img_hv_type`` and ``hw_vm_mode`` (legacy ``architecture``, ``hypervisor_type``,
  ``vm_mode``), each canonicalised. When it asks for none of the three the node passes,
  whatever ``img_hv_requested_version`` says.
* Otherwise the node must report some ``supported_instances`` and one triple
  ``(arch, hv_type, vm_mode)`` must contain every asked value (membership in the
  triple, as Nova tests it), and for that triple the node's hypervisor version must meet
  ``img_hv_requested_version`` (``>=8.0, <9``; skipped when either is missing; the
  version integer ``8002000`` reads ``8.2.0``) and its ``cpu_info.maxphysaddr.bits``
  be at least ``hw_maxphysaddr_bits`` (skipped when either is missing).

``supported_instances`` are what the hypervisor reports (the sync and cortex-agent
store them); for a node without them :func:`supported_instances` derives libvirt's
answer from the architecture and hypervisor type.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_ARCH_ALIASES = {"i386": "i686", "i486": "i686", "i586": "i686", "x86_32": "i686",
                 "x86_32p": "i686", "amd64": "x86_64"}
_VM_MODE_ALIASES = {"pv": "xen", "hv": "hvm", "baremetal": "hvm"}
_PREDICATE = re.compile(r"^\s*(<=|>=|<|>|!=|==)\s*(\d+(?:\.\d+)*)\s*$")
_COMPARE = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
            ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}
#: Guest architectures a libvirt host of an architecture runs natively (KVM/QEMU).
_GUEST_ARCHES = {"x86_64": ("x86_64", "i686")}
#: Domain types libvirt reports for a hypervisor type (lower case).
_DOMAIN_TYPES = {"qemu": ("qemu", "kvm"), "kvm": ("kvm", "qemu"),
                 "vmware vcenter server": ("vmware",), "ironic": ("baremetal",)}


def canonical_arch(name: Any) -> str | None:
    """``Architecture.canonicalize``: lower case, i386..i586/x86_32 are i686, amd64 x86_64."""
    if name is None or name == "":
        return None
    name = str(name).lower()
    return _ARCH_ALIASES.get(name, name)


def canonical_hv_type(name: Any) -> str | None:
    """``HVType.canonicalize``: lower case, ``xapi`` is ``xen``."""
    if name is None or name == "":
        return None
    name = str(name).lower()
    return "xen" if name == "xapi" else name


def canonical_vm_mode(name: Any) -> str | None:
    """``VMMode.canonicalize``: lower case, ``pv`` is ``xen``, ``hv``/``baremetal`` ``hvm``."""
    if name is None or name == "":
        return None
    name = str(name).lower()
    return _VM_MODE_ALIASES.get(name, name)


def wanted(props: Mapping[str, Any], default_architecture: str | None = None
           ) -> tuple[str | None, str | None, str | None, str | None, int | None]:
    """``(arch, hv type, vm mode, version predicate, maxphysaddr bits)`` the image asks for."""
    arch = props.get("hw_architecture") or props.get("architecture") or default_architecture
    bits = props.get("hw_maxphysaddr_bits")
    return (canonical_arch(arch),
            canonical_hv_type(props.get("img_hv_type") or props.get("hypervisor_type")),
            canonical_vm_mode(props.get("hw_vm_mode") or props.get("vm_mode")),
            props.get("img_hv_requested_version") or props.get("hypervisor_version_requires"),
            int(bits) if bits not in (None, "") else None)


def supported_instances(node) -> tuple[tuple[str, str, str], ...]:
    """The node's ``(arch, hv_type, vm_mode)`` triples: reported, else libvirt's for its kind.

    ``node``: a NodeState. A libvirt (``QEMU``/``kvm``) node of architecture A runs the
    guest architectures :data:`_GUEST_ARCHES` lists for A (x86_64 also runs i686) in
    ``hvm`` mode under domain types ``kvm`` and ``qemu``; a vCenter node ``vmware``, an
    Ironic node ``baremetal``, another hypervisor type its own name. No architecture:
    none.
    """
    if node.supported_instances is not None:
        return node.supported_instances
    arch = canonical_arch(node.cpu_arch or (node.cpu_info or {}).get("arch"))
    if not arch:
        return ()
    kind = canonical_hv_type(node.hypervisor_type) or ""
    domains = _DOMAIN_TYPES.get(kind, (kind,) if kind else ())
    return tuple((guest, domain, "hvm") for guest in _GUEST_ARCHES.get(arch, (arch,))
                 for domain in domains)


def image_refusal(image: tuple, instances, hypervisor_version: int | None,
                  maxphysaddr_bits: int | None) -> str | None:
    """Why a node with these facts cannot run ``image`` (a :func:`wanted` tuple), or None.

    ``instances``: the node's supported instance triples; ``hypervisor_version`` Nova's
    integer (major*10^6 + minor*10^3 + micro); ``maxphysaddr_bits`` the node's
    ``cpu_info.maxphysaddr.bits``.
    """
    arch, hv_type, vm_mode, version, bits = image
    asked = tuple(v for v in (arch, hv_type, vm_mode) if v)
    if not asked:
        return None
    if not instances:
        return f"the node reports no supported instances for {'/'.join(asked)}"
    fitting = [t for t in instances if all(v in t for v in asked)]
    if not fitting:
        return f"no supported instance runs {'/'.join(asked)}"
    if version and hypervisor_version:
        refusal = version_refusal(hypervisor_version, version)
        if refusal:
            return refusal
    if bits and maxphysaddr_bits and maxphysaddr_bits < bits:
        return f"maxphysaddr bits {maxphysaddr_bits} < image's {bits}"
    return None


def version_text(hypervisor_version: int) -> str:
    """Nova's integer version as oslo prints it: ``8002000`` is ``8.2.0``, ``1000`` ``1.0``."""
    parts: list[int] = []
    while hypervisor_version:
        parts.insert(0, hypervisor_version % 1000)
        hypervisor_version //= 1000
    return ".".join(map(str, parts))


def _release(text: str) -> tuple[int, ...]:
    """A dotted release with trailing zeros dropped (``8.2.0`` equals ``8.2``)."""
    parts = [int(x) for x in text.split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def version_refusal(hypervisor_version: int, predicate: str) -> str | None:
    """Check ``hypervisor_version`` against a predicate list like ``>=8.0, <9``.

    An unreadable predicate refuses (Nova raises on it).
    """
    have = _release(version_text(hypervisor_version))
    for part in str(predicate).split(","):
        found = _PREDICATE.match(part)
        if found is None:
            return f"unreadable img_hv_requested_version {predicate!r}"
        if not _COMPARE[found[1]](have, _release(found[2])):
            return (f"hypervisor version {version_text(hypervisor_version)} does not meet "
                    f"{predicate}")
    return None
