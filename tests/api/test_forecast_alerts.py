"""The shipped alert rules, run by promtool on the gauges /metrics really exports."""

import shutil
import subprocess
from datetime import UTC, datetime

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import delete

from cortex.db.models import GpuForecast
from cortex.store.demand import ForecastStore
from tests.conftest import REPO

RULES = REPO / "etc" / "cortex" / "prometheus-alerts.yaml"
FAMILIES = ("cortex_gpu_days_to_exhaustion", "cortex_gpu_days_to_exhaustion_pessimistic",
            "cortex_gpu_forecast_timestamp_seconds")


def document(model, zone, days, early):
    """A stored forecast document with the fields the metrics read."""
    return {"computed_at": datetime.now(UTC).isoformat(), "model": model,
            "availability_zone": zone, "horizon_hours": 336, "supply_gpus": 64,
            "used_gpus": 40, "days_to_exhaustion": days,
            "days_to_exhaustion_pessimistic": early, "method": "test"}


@pytest.fixture
def forecasts(engine):
    ForecastStore(engine).replace([
        document("NVIDIA H100 80GB HBM3", "az-1", 2.5, 1.5),
        document("NVIDIA H100 80GB HBM3", None, 10.0, 6.0),
        document("NVIDIA L40S", "az-1", None, None)])
    yield
    with engine.begin() as connection:
        connection.execute(delete(GpuForecast))


def exported_series(client):
    """promtool input series of the forecast gauges in the app's exposition."""
    text = client.get("/metrics").get_data(as_text=True)
    series = []
    for family in text_string_to_metric_families(text):
        if family.name not in FAMILIES:
            continue
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            value = "Inf" if sample.value == float("inf") else repr(sample.value)
            if family.name == "cortex_gpu_forecast_timestamp_seconds":
                value = "0"  # computed at the epoch: promtool's clock starts there
            series.append({"series": f"{sample.name}{{{labels}}}", "values": f"{value}+0x300"})
    return series


def annotations(alert, model, zone, value):
    """The annotations the rule writes (its templates, filled as Go would fill them)."""
    rule = next(r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]
                if r["alert"] == alert)
    found = dict(rule.get("annotations", {}))
    found["summary"] = (found["summary"]
                        .replace("{{ $labels.model }}", model)
                        .replace("{{ with $labels.availability_zone }}{{ . }}{{ else }}all "
                                 "zones{{ end }}", zone or "all zones")
                        .replace("{{ $value | humanize }}", value))
    return found


def test_alert_rules_fire_on_the_exported_gauges(client, forecasts, tmp_path):
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: tests/run.sh installs Debian's prometheus package"
    h100 = "NVIDIA H100 80GB HBM3"

    def labels(severity, zone):  # an empty label is no label in Prometheus
        return {"severity": severity, "model": h100} | ({"availability_zone": zone} if zone
                                                        else {})

    def alert(name, severity, zone, value):
        return {"exp_labels": labels(severity, zone),
                "exp_annotations": annotations(name, h100, zone, value)}

    tests = {"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": exported_series(client),
        "alert_rule_test": [
            {"eval_time": "150m", "alertname": "CortexGpuExhaustionWithin14Days",
             "exp_alerts": [alert("CortexGpuExhaustionWithin14Days", "warning", "az-1", "2.5"),
                            alert("CortexGpuExhaustionWithin14Days", "warning", "", "10")]},
            {"eval_time": "150m", "alertname": "CortexGpuExhaustionWithin3Days",
             "exp_alerts": [alert("CortexGpuExhaustionWithin3Days", "critical", "az-1", "2.5")]},
            {"eval_time": "150m", "alertname": "CortexGpuExhaustionPossibleWithin7Days",
             "exp_alerts": [
                 {"exp_labels": labels("info", z),
                  "exp_annotations": annotations("CortexGpuExhaustionPossibleWithin7Days",
                                                 h100, z, "")} for z in ("az-1", "")]},
            {"eval_time": "200m", "alertname": "CortexGpuForecastStale",
             "exp_alerts": [{"exp_labels": {"severity": "warning"},
                             "exp_annotations": annotations("CortexGpuForecastStale", "", "",
                                                            "")}]},
            {"eval_time": "60m", "alertname": "CortexGpuForecastStale", "exp_alerts": []},
        ]}]}
    path = tmp_path / "alerts-test.yaml"
    path.write_text(yaml.safe_dump(tests))
    done = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    done = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
