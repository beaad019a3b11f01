"""GPU supply from the knowledge: whole GPUs per model and zone, and how many are used.

Counted: GPUs that can be passed through whole (not split by MIG, not on a vGPU host:
:attr:`cortex.knowledge.topology.Gpu.passthrough`) and healthy, on hosts whose
nova-compute service is enabled, by model (:func:`cortex.knowledge.gpu_names.gpu_model`,
the name the demand is recorded under) and availability zone. ``(model, None)`` sums a
model over every zone, and ``("any", zone)`` every model of a zone: the keys that
demand naming no zone or no model counts against.
"""

from __future__ import annotations

from dataclasses import dataclass

from cortex.knowledge.gpu_names import ANY_MODEL, gpu_model, names_by_product
from cortex.knowledge.view import KnowledgeView


@dataclass
class Supply:
    """Whole GPUs of one model in one zone (``total``) and those a guest holds (``used``)."""

    total: int = 0
    used: int = 0

    @property
    def free(self) -> int:
        """GPUs not held by a guest."""
        return self.total - self.used


def gpu_supply(view: KnowledgeView) -> dict[tuple[str, str | None], Supply]:
    """``{(model, zone): Supply}`` over the view's enabled GPU hosts (module docstring).

    Every key with a zone has its all-zone sum ``(model, None)``, and every model its
    ``("any", zone)`` and ``("any", None)`` sums.
    """
    supply: dict[tuple[str, str | None], Supply] = {}
    names = names_by_product(view)
    for host in view.hosts.values():
        if host.topology is None or not host.enabled:
            continue
        zone = host.availability_zone
        for gpu in host.topology.gpus:
            if not gpu.passthrough or not gpu.healthy:
                continue
            model = gpu_model(gpu, names)
            for key in {(model, zone), (model, None), (ANY_MODEL, zone), (ANY_MODEL, None)}:
                entry = supply.setdefault(key, Supply())
                entry.total += 1
                entry.used += bool(gpu.in_use)
    return supply
