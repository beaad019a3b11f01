"""The Grafana dashboard in etc/ is built on metric names the API really exposes."""

import json
import re

from prometheus_client.parser import text_string_to_metric_families

from cortex.api.forecasts import ForecastCollector
from cortex.api.metrics import ApiMetrics, KnowledgeCollector, kpi_families
from tests.conftest import REPO
from tests.fakes import ViewCache, host, inventory, view

DASHBOARD = REPO / "etc" / "cortex" / "grafana-dashboard.json"
SUFFIXES = ("_bucket", "_count", "_sum", "_total")


def exposed_names():
    fleet = view(host("h", inventories={"CUSTOM_PCI_10DE_2330": inventory(8, used=3),
                                        "VCPU": inventory(16)}))
    names = {f.name for f in ApiMetrics().registry.collect()}
    names |= {f.name for f in kpi_families(fleet)}
    collector = KnowledgeCollector(ViewCache(fleet))
    names |= {f.name for f in collector.collect()}
    names |= {f.name for f in text_string_to_metric_families(collector.rendered().decode())}
    forecast = {"computed_at": "2026-11-26T00:00:00+00:00", "model": "H100",
                "availability_zone": "az-1", "supply_gpus": 8, "used_gpus": 2,
                "days_to_exhaustion": None, "days_to_exhaustion_pessimistic": 3.5}
    names |= {f.name for f in ForecastCollector(lambda: [forecast]).collect()}
    return names


def expressions():
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [t["expr"] for p in panels for t in p.get("targets", ())]


def test_every_expression_uses_exposed_metrics():
    names = exposed_names()
    used = set()
    for expr in expressions():
        for name in re.findall(r"\bcortex_[a-z0-9_]+", expr):
            base = next((name[:-len(s)] for s in SUFFIXES if name.endswith(s)
                         and name[:-len(s)] in names), name)
            assert base in names, (name, expr)
            used.add(base)
    assert {"cortex_scheduler_requests", "cortex_pipeline_step_duration_seconds",
            "cortex_gpus_stranded", "cortex_knowledge_age_seconds",
            "cortex_gpu_days_to_exhaustion", "cortex_gpu_forecast_timestamp_seconds"} <= used


def test_dashboard_is_importable_grafana_json():
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["__inputs"][0]["pluginId"] == "prometheus"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"}
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
