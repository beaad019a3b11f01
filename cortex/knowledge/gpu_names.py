"""How demand and supply name a GPU model: NVML's name, the same on both sides.

The decision log records the model a GPU create counts against
(:mod:`cortex.scheduler.demand`) and the forecasts count the supply per model
(:mod:`cortex.forecast.supply`); both name it with :func:`gpu_model`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The model of a request that names none and was not placed.
ANY_MODEL = "any"
#: The derived key of :func:`names_by_product` (a simulator whose fleet never changes may
#: set it once for all its views).
NAMES_KEY = ("gpu-names-by-product",)


def gpu_model(gpu: Any, names: Mapping[str, str] | None = None) -> str:
    """The model name of a knowledge GPU.

    NVML's name; else the name ``names`` (:func:`names_by_product`) gives its PCI product
    id, so a GPU a fleet file describes without a name counts with its named siblings;
    else ``vendor:device`` PCI ids.
    """
    if gpu.name:
        return gpu.name
    product = (gpu.device_id or "").lower()
    if names and product in names:
        return names[product]
    return f"{gpu.vendor_id}:{gpu.device_id}"


def names_by_product(view: Any) -> dict[str, str]:
    """``{PCI product id (lower case): NVML name}`` over the view's named GPUs.

    Built once per knowledge version (``view.root.derived``), overlays included: it
    walks every GPU of the fleet, 1.7 ms at 1,000 HGX hosts.
    """
    return view.root.derived(NAMES_KEY, _names)


def _names(view: Any) -> dict[str, str]:
    """:func:`names_by_product`, computed."""
    names: dict[str, str] = {}
    for host in view.hosts.values():
        for gpu in host.topology.gpus if host.topology is not None else ():
            if gpu.device_id and gpu.name:
                names.setdefault(gpu.device_id.lower(), gpu.name)
    return names
