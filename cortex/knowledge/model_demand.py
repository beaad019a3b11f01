"""How hard the demand that can only use one GPU model leans on that model's GPUs.

A create that names its GPU model (a flavor's PCI alias or Cyborg product trait) can go
only to hosts of that model; a create that names none can go anywhere. When the named
demand leans on one model more than the fleet's GPUs do, every GPU of that model an
unnamed create takes is one the named creates will miss once the fleet fills, while GPUs
of other models stay free. Nova's PCIWeigher keeps hosts with PCI devices for the
requests that need devices by the same reasoning, one level coarser.

:func:`model_pressure` gives, per model, the share of the recorded named GPU demand that
names it over the share of the fleet's GPUs it has (``KnowledgeView.gpu_model_demand``
against :func:`model_supply`): 1.0 when the named demand is spread over the models as
the fleet's GPUs are, above 1 for a model it leans on, 0.0 for one nobody names.
``weigher_gpu_model_reserve`` reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from cortex.knowledge.gpu_names import ANY_MODEL, gpu_model, names_by_product
from cortex.knowledge.view import KnowledgeView

#: The derived key of :func:`model_supply` (a simulator whose fleet never changes may
#: set it once for all its views).
SUPPLY_KEY = ("gpu-model-supply",)


def model_supply(view: KnowledgeView) -> Mapping[str, int]:
    """``{GPU model: healthy GPUs}`` over the view's enabled hosts, once per knowledge version.

    Every GPU counts whole, passed through, split into vGPUs or MIG instances alike;
    models as :func:`cortex.knowledge.gpu_names.gpu_model` names them.
    """
    return view.root.derived(SUPPLY_KEY, _supply)


def _supply(view: KnowledgeView) -> Mapping[str, int]:
    """:func:`model_supply`, computed."""
    names = names_by_product(view)
    supply: dict[str, int] = {}
    for host in view.hosts.values():
        if host.topology is None or not host.enabled:
            continue
        for gpu in host.topology.gpus:
            if gpu.healthy:
                model = gpu_model(gpu, names)
                supply[model] = supply.get(model, 0) + 1
    return MappingProxyType(supply)


def model_pressure(view: KnowledgeView, min_learned: float = 0.0) -> Mapping[str, float]:
    """``{GPU model: named demand share / supply share}`` (module docstring); ``{}`` unlearned.

    ``min_learned``: the GPUs of recorded demand (all models and ``any``) below which
    nothing is known yet; ``{}`` too when no recorded create named a model. A model
    without GPUs in the view is left out. Built once per knowledge version.
    """
    root = view.root
    demand = root.gpu_model_demand
    if not demand:  # nothing recorded: the fleet is not walked
        return MappingProxyType({})
    return root.derived(("gpu-model-pressure", min_learned),
                        lambda _: _pressure(demand, root, min_learned))


def _pressure(demand: Mapping[str, float], root: KnowledgeView,
              min_learned: float) -> Mapping[str, float]:
    """:func:`model_pressure` from the demand table and the view's supply."""
    named = sum(v for model, v in demand.items() if model != ANY_MODEL)
    if named <= 0 or sum(demand.values()) < min_learned:
        return MappingProxyType({})
    supply = model_supply(root)
    gpus = sum(supply.values())
    if gpus <= 0:
        return MappingProxyType({})
    return MappingProxyType({
        model: (demand.get(model, 0.0) / named) / (count / gpus)
        for model, count in supply.items() if count and model != ANY_MODEL})
