"""The stored GPU forecasts as the API serves them (``/v1/forecasts``, metrics, dashboard).

The forecasts are fitted by cortex-sync's ``forecast`` source (or ``cortex-manage
forecast --store``) and kept in ``gpu_forecasts``
(:class:`cortex.store.demand.ForecastStore`); nothing here computes one.
"""

from __future__ import annotations

from typing import Any

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


def select(engine: Any, model: Any = ANY, family: Any = ANY, zone: Any = ANY,
           series: bool = False) -> list[dict[str, Any]]:
    """The stored forecasts of ``model``, flavor ``family`` and availability ``zone``.

    Each filter left at :data:`ANY` selects all; ``family`` None the GPU models'
    forecasts, ``zone`` None the all-zone ones. Without ``series`` the hourly
    ``history`` and ``points`` are left out. Raises DatabaseUnreachable.
    """
    documents = stored(engine)
    if model is not ANY:
        documents = [d for d in documents if d["model"] == model]
    if family is not ANY:
        documents = [d for d in documents if d.get("flavor_family") == family]
    if zone is not ANY:
        documents = [d for d in documents if d["availability_zone"] == zone]
    return documents if series else [without_series(d) for d in documents]
