"""The read-only operator dashboard at ``/ui``: fleet, hosts, GPUs, decisions, timeline.

Server-rendered Jinja templates (``templates/``) with one stylesheet, a few lines of
JavaScript and the vendored htmx (``static/``, see its ``VENDORED.md``); no front-end
build step. Every page reads what the worker already holds, through the same services
as the API: the knowledge view, the decision store, the loaded pipelines,
:mod:`cortex.services.history` and :mod:`cortex.services.forecasts`.

- :mod:`~cortex.dashboard.views`: the handlers (parse the query, read, render);
- :mod:`~cortex.dashboard.fleet`, :mod:`~cortex.dashboard.gpus`: the tables read from
  the knowledge view (the GPU heatmap: one square per GPU, NVLink islands boxed);
- :mod:`~cortex.dashboard.topology`, :mod:`~cortex.dashboard.timeline`,
  :mod:`~cortex.dashboard.forecasts`: SVG coordinates the templates draw (a host's
  topology, the scheduling timeline, the GPU forecasts);
- :mod:`~cortex.dashboard.units`: numbers as people read them (the ``quantity`` filter).

Live panels: a panel that reloads itself is its own template (``_timeline_panel.html``,
``_gpus_panel.html``, ``_forecasts_panel.html``) included by the page inside the
``live`` macro of ``_macros.html``, which has htmx GET ``/ui/<page>/panel`` (the same
query) every ``?refresh=`` seconds (default
:data:`~cortex.dashboard.views.REFRESH_SECONDS`, 0: off) and swap the panel's content.
To make another panel live: move it into ``_<name>_panel.html``, build its context in
one function used by both the page and a ``/ui/<page>/panel`` handler, and add that
route to :data:`ROUTES` with the page's policy.

The app factory (:func:`cortex.api.app.create_app`) registers :data:`ROUTES` with its
own, behind the same authorization, and renders its error pages with these templates.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cortex.dashboard import views
from cortex.dashboard.units import quantity

__all__ = ["ROUTES", "TEMPLATES", "quantity"]

#: The templates folder (the app's: its error pages share the dashboard's look).
TEMPLATES = Path(__file__).parent / "templates"

#: path -> {method: (handler, policy)}; policies in cortex.api.auth.POLICIES.
ROUTES: dict[str, dict[str, tuple[Any, str]]] = {
    "/ui": {"GET": (views.fleet, "reader")},
    "/ui/": {"GET": (views.to_fleet, "public")},
    "/ui/hosts/<host>": {"GET": (views.host_page, "reader")},
    "/ui/decisions": {"GET": (views.decisions_page, "reader")},
    "/ui/decisions/<decision_id>": {"GET": (views.decision_page, "reader")},
    "/ui/pipelines": {"GET": (views.pipelines_page, "reader")},
    "/ui/descheduler": {"GET": (views.descheduler_page, "reader")},
    "/ui/timeline": {"GET": (views.timeline_page, "reader")},
    "/ui/timeline/panel": {"GET": (views.timeline_panel, "reader")},
    "/ui/gpus": {"GET": (views.gpus_page, "reader")},
    "/ui/gpus/panel": {"GET": (views.gpus_panel, "reader")},
    "/ui/forecasts": {"GET": (views.forecasts_page, "reader")},
    "/ui/forecasts/panel": {"GET": (views.forecasts_panel, "reader")},
    "/ui/static/<path:name>": {"GET": (views.static_file, "public")},
}
