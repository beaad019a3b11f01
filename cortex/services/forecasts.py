"""The stored GPU forecasts as the API serves them (``/v1/forecasts``, metrics, dashboard).

The forecasts are fitted by cortex-sync's ``forecast`` source (or ``cortex-manage
forecast --store``) and kept in ``gpu_forecasts``
(:class:`cortex.store.demand.ForecastStore`); nothing here fits one. A flavor family's
forecast is set against its flavors' placeable supply when it is read
(:func:`with_placeable`): the instances that fit move with every knowledge version,
the forecast once an hour.
"""

from __future__ import annotations

from typing import Any

from cortex.forecast.plan import FlavorSupply, against_placeable
from cortex.services.errors import database_reads
from cortex.store.demand import ForecastStore, without_series

#: Any value of a selection: the filter is not applied.
ANY = object()


def stored(engine: Any) -> list[dict[str, Any]]:
    """Every forecast document of the newest computation (with series); [] if none.

    Raises DatabaseUnreachable.
    """
    with database_reads():
        return ForecastStore(engine).latest()


def with_placeable(documents: list[dict[str, Any]], supply: FlavorSupply | None
                   ) -> list[dict[str, Any]]:
    """``documents`` (with series), each family's set against ``supply``.

    :func:`cortex.forecast.plan.against_placeable`; with ``supply`` None (the placeable
    counts not computed yet) each family document gets ``placeable`` None and no days.
    """
    if supply is not None:
        return [against_placeable(d, supply) for d in documents]
    return [d | {"placeable": None, "placeable_days_to_exhaustion": None,
                 "placeable_flavor": None} if d.get("flavor_family") is not None else d
            for d in documents]


def select(engine: Any, model: Any = ANY, family: Any = ANY, zone: Any = ANY,
           series: bool = False, supply: Any = ANY) -> list[dict[str, Any]]:
    """The stored forecasts of ``model``, flavor ``family`` and availability ``zone``.

    Each filter left at :data:`ANY` selects all; ``family`` None the GPU models'
    forecasts, ``zone`` None the all-zone ones. Without ``series`` the hourly
    ``history`` and ``points`` are left out. ``supply``: the flavors' placeable supply
    (:class:`~cortex.forecast.plan.FlavorSupply` or None: :func:`with_placeable`;
    :data:`ANY`: the documents as stored). Raises DatabaseUnreachable.
    """
    documents = stored(engine)
    if supply is not ANY:
        documents = with_placeable(documents, supply)
    if model is not ANY:
        documents = [d for d in documents if d["model"] == model]
    if family is not ANY:
        documents = [d for d in documents if d.get("flavor_family") == family]
    if zone is not ANY:
        documents = [d for d in documents if d["availability_zone"] == zone]
    return documents if series else [without_series(d) for d in documents]
