"""cortex-agent reads each GPU's power draw from NVML (milliwatts) and reports watts."""

import pynvml
import pytest

from cortex.agent.report import build_report
from cortex.api.schema import RequestValidator, load_openapi
from tests.topology_fakes import FakeNvml, agent_report, load_layout, write_tree

VALIDATOR = RequestValidator(load_openapi())


def report_of(tmp_path, layout, nvml=None):
    """The agent's report for ``layout`` on a fake tree and ``nvml`` (a FakeNvml by default)."""
    write_tree(tmp_path, layout)
    return build_report("h", nvml or FakeNvml(layout), tmp_path, tmp_path / "proc")


def test_power_is_reported_in_watts_per_gpu(tmp_path):
    layout = load_layout("hgx-h100-8gpu")
    for number, gpu in enumerate(layout["gpus"]):
        gpu["power_mw"] = 69841 + 100_000 * number
    report = report_of(tmp_path, layout)
    assert [g["power_watts"] for g in report["gpus"]] == [
        pytest.approx(69.841 + 100 * n) for n in range(8)]
    assert all(isinstance(g["power_watts"], float) for g in report["gpus"])
    assert not any("Power" in u for g in report["gpus"] for u in g["unsupported"])
    assert VALIDATOR.topology_errors(report) == []


@pytest.mark.parametrize("key, said", [("unsupported", "Not Supported"),
                                       ("no_permission", "Insufficient Permissions")])
def test_a_gpu_that_cannot_say_reports_null_and_names_the_call(tmp_path, key, said):
    layout = load_layout("hgx-h100-8gpu")
    layout["gpus"][0][key] = ["nvmlDeviceGetPowerUsage"]
    report = report_of(tmp_path, layout)
    first, second = report["gpus"][:2]
    assert first["power_watts"] is None
    assert f"nvmlDeviceGetPowerUsage: {said}" in first["unsupported"]
    assert second["power_watts"] == pytest.approx(69.841)  # the others still answer
    assert VALIDATOR.topology_errors(report) == []


def test_a_model_without_power_readings_answers_not_supported(tmp_path):
    layout = load_layout("l40s-4gpu-pcie")
    for gpu in layout["gpus"]:
        del gpu["power_mw"]
    nvml = FakeNvml(layout)
    report = report_of(tmp_path, layout, nvml)
    assert [g["power_watts"] for g in report["gpus"]] == [None] * 4
    assert nvml.calls.count("nvmlDeviceGetPowerUsage") == 4
    with pytest.raises(pynvml.NVMLError_NotSupported):  # the real class, as NVML raises it
        nvml.nvmlDeviceGetPowerUsage(nvml.nvmlDeviceGetHandleByIndex(0))


def test_an_nvidia_ml_py_without_the_call_reports_null(tmp_path):
    class Old(FakeNvml):
        nvmlDeviceGetPowerUsage = None  # what getattr finds for a function it lacks

    layout = load_layout("l40s-4gpu-pcie")
    gpu = report_of(tmp_path, layout, Old(layout))["gpus"][0]
    assert gpu["power_watts"] is None
    assert "nvmlDeviceGetPowerUsage: not in this nvidia-ml-py" in gpu["unsupported"]


def test_gpus_passed_through_are_invisible_to_nvml_and_have_no_power(tmp_path):
    report = agent_report("a100-pcie-4gpu-nvlink-pairs", tmp_path)
    powers = sorted((g["driver"], g["power_watts"]) for g in report["gpus"]
                    if g["power_watts"] is not None)
    assert powers == [("nvidia", 36.512), ("nvidia", 36.512)]
    assert [g["power_watts"] for g in report["gpus"] if g["driver"] == "vfio-pci"] == [None] * 2


@pytest.mark.parametrize("value, valid", [(0, True), (412.5, True), (None, True),
                                          (-1, False), ("400", False)])
def test_the_schema_takes_watts_or_null(tmp_path, value, valid):
    report = agent_report("l40s-4gpu-pcie", tmp_path)
    report["gpus"][0]["power_watts"] = value
    errors = VALIDATOR.topology_errors(report)
    assert (errors == []) is valid, errors
