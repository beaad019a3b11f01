"""GPU demand of a decision: what a create asked for, where it went, the power it adds.

Each live Nova create that asks for GPUs is demand, whether placed or refused; the
decision records it (``Decision.demand``) and the decision log keeps it apart in
``gpu_demand``, where the forecasts (:mod:`cortex.forecast`) read it. Moves, resizes and
rebuilds are not counted: they move demand that already exists. A call that failed
inside Cortex (a 503) is not demand refused, and is not counted either. A Kubernetes
pod is counted once, placed, when its Binding is made (:mod:`cortex.services.kubernetes`):
kube-scheduler asks the extender's filter and prioritize again in every scheduling
cycle of a pod, so those calls are not demand (``RunOptions.demand``), and a pod it
cannot place is not counted refused.

The GPU model is named as the knowledge names it
(:func:`cortex.knowledge.gpu_names.gpu_model`), the same name the supply side counts
(:func:`cortex.forecast.supply.gpu_supply`): the model of the GPUs the first host offers
for the request when placed, else the model the request's PCI product id names in the
fleet, else ``any``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cortex.knowledge.energy import DrawDefaults, added_watts, model_draws
from cortex.knowledge.gpu_names import ANY_MODEL, gpu_model, names_by_product
from cortex.knowledge.view import HostState, KnowledgeView
from cortex.request.nova import NovaRequest


def requested_model(request: NovaRequest, view: KnowledgeView,
                    host: HostState | None) -> str:
    """The model a GPU request counts against (module docstring); never raises.

    The fleet's names (:func:`names_by_product`, a walk over every GPU once per
    knowledge version) are read only when the host's GPU has no name of its own or no
    host was found: an agent names every GPU it reports, so a placed create rarely needs
    them, and a fresh worker's first create does not build them (they cost 1.7 ms at 1,000
    HGX hosts).
    """
    products = request.gpu_products
    if host is not None and host.topology is not None:
        for gpu in host.topology.gpus:
            if not products or (gpu.device_id or "").lower() in products:
                return gpu.name or gpu_model(gpu, names_by_product(view))
    names = names_by_product(view) if products else {}
    for product in sorted(products):
        if product in names:
            return names[product]
    return ANY_MODEL


def gpu_demand(request: Any, view: KnowledgeView, result: tuple[str, ...],
               energy: Any = None) -> Mapping[str, Any] | None:
    """The demand of one answered call, or None when it is not GPU demand.

    ``request``: the parsed request (only a :class:`NovaRequest` create with GPUs or vGPUs
    counts); ``result``: the hosts answered, best first (empty: refused). Returns
    ``{"model", "model_named", "flavor", "availability_zone", "gpus", "vgpus", "instances",
    "outcome", "host", "power_delta_watts"}``: ``model_named`` whether the request named
    a GPU model (a PCI product id) rather than taking any GPU; whole GPUs and vGPUs over
    all ``num_instances``; outcome ``placed`` or ``refused``; the zone the request asked
    for, else the first host's; the watts the first host would draw more for the whole GPUs
    (:func:`cortex.knowledge.energy.added_watts` per GPU, with ``energy``, the
    ``weigher_gpu_energy`` step's options, or :class:`~cortex.knowledge.energy.DrawDefaults`;
    None when refused or the host is unknown).
    """
    if not isinstance(request, NovaRequest) or request.intent != "create":
        return None
    vgpus = sum(r.count for r in request.vgpu_devices)
    if not request.gpu_count and not vgpus:
        return None
    host = view.hosts.get(result[0]) if result else None
    power = None
    if host is not None and request.gpu_count:
        defaults = energy or DrawDefaults()
        watts = added_watts(host, model_draws(view.root, defaults.idle_watts), defaults)
        power = round(watts * request.gpu_count * request.num_instances, 1)
    zone = request.availability_zone or (host.availability_zone if host is not None else None)
    return {"model": requested_model(request, view, host),
            "model_named": bool(request.gpu_products), "flavor": request.flavor.name,
            "availability_zone": zone,
            "gpus": request.gpu_count * request.num_instances,
            "instances": request.num_instances,
            "vgpus": vgpus * request.num_instances,
            "outcome": "placed" if result else "refused",
            "host": result[0] if result else None, "power_delta_watts": power}


def energy_options(pipeline: Any) -> Any:
    """The options of ``pipeline``'s ``weigher_gpu_energy`` step, None without one.

    They carry :class:`~cortex.knowledge.energy.DrawDefaults`' three attributes.
    """
    for step in getattr(pipeline, "weighers", ()):
        plugin: Any = getattr(step, "plugin", None)
        if getattr(plugin, "name", None) == "weigher_gpu_energy":
            return plugin.options
    return None
