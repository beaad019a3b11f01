"""cortex-agent on fake NVML and fake sysfs trees built from real machine layouts."""

import json

import pynvml
import pytest

from cortex.agent import host as host_facts
from cortex.agent.gpus import normalise_bus_id, vgpu_type_profile
from cortex.agent.report import build_report
from cortex.api.schema import RequestValidator, load_openapi
from tests.topology_fakes import FakeNvml, agent_report, layout_names, load_layout, write_tree

VALIDATOR = RequestValidator(load_openapi())


def by_address(report):
    return {g["pci_address"]: g for g in report["gpus"]}


def link(report, a, b):
    return next(x for x in report["gpu_links"] if {x["a"], x["b"]} == {a, b})


@pytest.mark.parametrize("name", layout_names())
def test_every_layout_reports_a_valid_topology(tmp_path, name):
    report = agent_report(name, tmp_path)
    assert VALIDATOR.topology_errors(report) == []
    layout = load_layout(name)
    assert sorted(by_address(report)) == sorted(g["pci"] for g in layout["gpus"])
    visible = [g for g in layout["gpus"] if g["driver"] == "nvidia"]
    assert len(report["gpu_links"]) == len(visible) * (len(visible) - 1) // 2
    assert report["nvml_error"] is None and report["driver_version"] == layout["driver_version"]
    json.dumps(report)  # JSON all the way down


# One row per layout: (cells, sockets, (address, numa node, numa source), pair, nvlink, level)
FACTS = [
    ("hgx-h100-8gpu", 2, [0, 1], ("0000:9a:00.0", 1, "nvml_memory_affinity"),
     ("0000:18:00.0", "0000:db:00.0"), 18, "SYSTEM"),
    ("dgx-a100-8gpu", 8, [0, 0, 0, 0, 1, 1, 1, 1], ("0000:07:00.0", 3, "nvml_memory_affinity"),
     ("0000:07:00.0", "0000:0f:00.0"), 12, "MULTIPLE"),
    ("l40s-4gpu-pcie", 2, [0, 1], ("0000:81:00.0", 1, "nvml_cpu_affinity"),
     ("0000:01:00.0", "0000:21:00.0"), 0, "NODE"),
    ("a100-pcie-4gpu-nvlink-pairs", 2, [0, 1], ("0000:17:00.0", 0, "sysfs"),
     ("0000:b1:00.0", "0000:ca:00.0"), 12, "NODE"),
    ("gh200", 2, [0, None], ("0009:01:00.0", 1, "nvml_numa_node"), None, None, None),
    ("a100-mig-4gpu", 2, [0, 1], ("0000:ca:00.0", 1, "nvml_memory_affinity"),
     ("0000:17:00.0", "0000:ca:00.0"), 0, "SYSTEM"),
]


@pytest.mark.parametrize("name, cells, sockets, gpu, pair, nvlink, level", FACTS,
                         ids=[f[0] for f in FACTS])
def test_layout_facts(tmp_path, name, cells, sockets, gpu, pair, nvlink, level):
    report = agent_report(name, tmp_path)
    assert [c["socket"] for c in report["numa_cells"]] == sockets
    assert len(report["numa_cells"]) == cells
    address, node, source = gpu
    assert (by_address(report)[address]["numa_node"],
            by_address(report)[address]["numa_source"]) == (node, source)
    if pair:
        found = link(report, *pair)
        assert (found["nvlink"], found["topology"]) == (nvlink, level)
        assert found["p2p_nvlink"] == ("OK" if nvlink else "NOT_SUPPORTED")


def test_hgx_cells_follow_nova_cpu_sets_and_linux_numbering(tmp_path):
    cell0, cell1 = agent_report("hgx-h100-8gpu", tmp_path)["numa_cells"]
    assert cell0["cpus"] == "0-55,112-167" and cell1["cpus"] == "56-111,168-223"
    assert cell0["dedicated_cpus"] == "6-55,118-167" and cell0["shared_cpus"] == "0-3,112-115"
    assert cell0["siblings"][0] == "0,112" and len(cell0["siblings"]) == 56
    assert cell0["memory_mb"] == 1048576 and cell0["distances"] == [10, 21]
    assert cell0["mempages"] == [{"size_kb": 4, "total": 1048576 * 256, "used": 0,
                                  "reserved": 0}]


def test_gh200_gpu_is_its_own_numa_node_and_in_a_fabric_clique(tmp_path):
    report = agent_report("gh200", tmp_path)
    gpu = report["gpus"][0]
    assert (gpu["numa_node"], gpu["pci_numa_node"]) == (1, 0)
    assert gpu["fabric"] == {"clique_id": 7, "cluster_uuid": "6f1c3f2a-52d4-4c3e-9d55-0d7c2a1b9e40"}
    memory_only = report["numa_cells"][1]
    assert (memory_only["cpus"], memory_only["socket"], memory_only["memory_mb"]) == ("", None,
                                                                                    97871)
    assert {"size_kb": 524288, "total": 64, "used": 0, "reserved": 0} in \
        report["numa_cells"][0]["mempages"]


def test_passed_through_gpus_come_from_sysfs_and_are_in_use(tmp_path):
    gpus = by_address(agent_report("a100-pcie-4gpu-nvlink-pairs", tmp_path))
    held = gpus["0000:17:00.0"]
    assert held["driver"] == "vfio-pci" and held["index"] is None and held["uuid"] is None
    assert (held["in_use"], held["in_use_source"]) == (True, "agent")
    # the QEMU process holding its VFIO group runs the Nova instance its -uuid names
    assert held["instance_uuid"] == "00000000-0000-0000-0000-00000000001e"
    assert held["device_id"] == "20b5" and "not visible to NVML" in held["unsupported"][0]
    free = gpus["0000:b1:00.0"]
    assert free["in_use"] is False and free["uuid"].startswith("GPU-") and free["index"] == 0
    assert free["name"] == "NVIDIA A100 80GB PCIe" and free["memory_mb"] == 81920


def test_mig_instances_and_virtualisation_mode(tmp_path):
    gpus = by_address(agent_report("a100-mig-4gpu", tmp_path))
    mixed = gpus["0000:ca:00.0"]
    assert mixed["mig"]["mode"] == "enabled" and mixed["virtualization_mode"] == "host_vgpu"
    assert [(i["id"], i["profile"], i["placement_start"]) for i in mixed["mig"]["instances"]] == [
        (2, "3g.40gb", 0), (5, "2g.20gb", 4), (13, "1g.10gb", 6), (14, "1g.10gb", 7)]
    assert mixed["dev_type"] == "type-PF" and mixed["compute_capability"] == "8.0"
    assert [i["profile"] for i in gpus["0000:17:00.0"]["mig"]["instances"]] == ["3g.40gb"] * 2


def test_held_mdevs_mark_mig_instances_in_use(tmp_path):
    layout = load_layout("a100-mig-4gpu")
    layout["gpus"][0]["mdevs"] = [["GRID A100D-3-40C", True], ["GRID A100D-3-40C", False]]
    write_tree(tmp_path, layout)
    gpu = by_address(build_report("h", FakeNvml(layout), tmp_path, tmp_path / "proc"))[
        "0000:17:00.0"]
    assert gpu["vgpus_in_use"] == 1
    assert [i["in_use"] for i in gpu["mig"]["instances"]] == [True, False]
    assert vgpu_type_profile("GRID A100D-7-80C") == "7g.80gb"
    assert vgpu_type_profile("GRID A100-40C") is None and vgpu_type_profile(None) is None


def test_unsupported_and_forbidden_nvml_calls_leave_nulls_not_errors(tmp_path):
    layout = load_layout("hgx-h100-8gpu")
    layout["gpus"][0]["unsupported"] = ["nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMigMode",
                                        "nvmlDeviceGetMemoryAffinity",
                                        "nvmlDeviceGetCpuAffinityWithinScope"]
    layout["gpus"][0]["no_permission"] = ["nvmlDeviceGetUUID", "nvmlDeviceGetRemappedRows"]
    write_tree(tmp_path, layout)
    gpu = build_report("h", FakeNvml(layout), tmp_path, tmp_path / "proc")["gpus"][0]
    assert gpu["memory_mb"] is None and gpu["uuid"] is None and gpu["mig"]["mode"] is None
    assert (gpu["numa_node"], gpu["numa_source"]) == (0, "sysfs")
    assert gpu["cpu_affinity"] is None
    unsupported = " ".join(gpu["unsupported"])
    assert "nvmlDeviceGetUUID: Insufficient Permissions" in unsupported
    assert "nvmlDeviceGetMemoryInfo: Not Supported" in unsupported
    # a function this nvidia-ml-py would lack: the fake has no nvmlDeviceGetCpuAffinity
    assert "nvmlDeviceGetCpuAffinity: not in this nvidia-ml-py" in unsupported
    assert gpu["health"] == {"healthy": True, "reasons": []}


def test_health_problems_make_a_gpu_unhealthy(tmp_path):
    layout = load_layout("l40s-4gpu-pcie")
    layout["gpus"][2]["health"] = {"retired_pages_pending": True, "remap_failed": True,
                                   "uncorrected_ecc": 3}
    write_tree(tmp_path, layout)
    gpu = by_address(build_report("h", FakeNvml(layout), tmp_path, tmp_path / "proc"))[
        "0000:81:00.0"]
    assert gpu["health"]["healthy"] is False
    assert gpu["health"]["reasons"] == ["retired pages pending (GPU reset needed)",
                                        "row remapping failed",
                                        "3 uncorrected ECC errors since the driver loaded"]


@pytest.mark.parametrize("error, words", [
    (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"),
    (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "Shared Library Not Found"),
])
def test_no_driver_means_no_nvml_facts_and_says_why(tmp_path, error, words):
    layout = load_layout("l40s-4gpu-pcie")
    write_tree(tmp_path, layout)
    report = build_report("h", FakeNvml(layout, init_error=error), tmp_path, tmp_path / "proc")
    assert words in report["nvml_error"] and report["gpu_links"] == []
    assert all(g["uuid"] is None and g["in_use"] is False for g in report["gpus"])
    assert len(report["gpus"]) == 4  # still listed from sysfs
    assert VALIDATOR.topology_errors(report) == []


def test_a_host_without_gpus_reports_zero_and_why(tmp_path):
    layout = load_layout("l40s-4gpu-pcie")
    layout["gpus"] = []
    write_tree(tmp_path, layout)
    report = build_report("h", FakeNvml(layout), tmp_path, tmp_path / "proc")
    assert report["gpus"] == [] and report["nvml_error"] == "NVML reports no GPU"
    assert len(report["numa_cells"]) == 2


def test_the_real_nvml_without_a_driver(tmp_path):
    """This machine has no NVIDIA driver: the real pynvml must fail softly."""
    write_tree(tmp_path, load_layout("gh200"))
    report = build_report("h", None, tmp_path, tmp_path / "proc")
    assert report["nvml_error"].startswith("NVML unavailable")
    assert [g["pci_address"] for g in report["gpus"]] == ["0009:01:00.0"]


def test_guests_pinned_cpus_shared_vcpus_and_memory(tmp_path):
    guests = [
        # pinned, NUMA-bound to node 0, 1 GiB pages, emulator thread isolated on CPU 10
        {"vcpus": ["6", "7", "118", "119"], "emulator": "10", "mems": "0",
         "anon_mb": {0: 512}, "hugetlb_mb": {0: 4096}},
        # shared vCPUs floating in node 1's shared CPUs
        {"vcpus": ["56-59,168-171"] * 3, "mems": "1", "anon_mb": {1: 2048}},
        # no NUMA topology: floats over both nodes, counted nowhere
        {"vcpus": ["0-3,56-59,112-115,168-171"] * 2, "mems": "0-1",
         "anon_mb": {0: 1024, 1: 1024}},
    ]
    report = agent_report("hgx-h100-8gpu", tmp_path, guests=guests)
    cell0, cell1 = report["numa_cells"]
    assert cell0["pinned_cpus"] == "6-7,10,118-119" and cell1["pinned_cpus"] == ""
    assert (cell0["cpu_usage"], cell1["cpu_usage"]) == (0, 3)
    assert (cell0["memory_usage_mb"], cell1["memory_usage_mb"]) == (4608, 2048)
    assert report["guests"] == 3


def test_nova_conf_cpu_sets(tmp_path):
    conf = tmp_path / "nova.conf"
    conf.write_text("[DEFAULT]\nvcpu_pin_set = 2-5\nreserved_huge_pages = "
                    "node:0,size:1GB,count:4, node:1,size:2048,count:64\n[compute]\n")
    sets = host_facts.read_nova_cpu_sets(conf)
    cpus, online = frozenset(range(8)), frozenset(range(16))
    assert sets.cell_sets(cpus, online) == ({2, 3, 4, 5}, {2, 3, 4, 5})  # legacy: both
    assert dict(sets.reserved_huge_pages) == {(0, 1048576): 4, (1, 2048): 64}
    conf.write_text("[compute]\ncpu_dedicated_set = 4-7,^5\n")
    assert host_facts.read_nova_cpu_sets(conf).cell_sets(cpus, online) == ({4, 6, 7}, set())
    conf.write_text("[compute]\ncpu_shared_set = 0-1\n")
    assert host_facts.read_nova_cpu_sets(conf).cell_sets(cpus, online) == (set(), {0, 1})
    assert host_facts.read_nova_cpu_sets(tmp_path / "absent").cell_sets(cpus, online) == (
        cpus, cpus)
    conf.write_text("[compute]\ncpu_dedicated_set = 4-x\n")
    with pytest.raises(ValueError):
        host_facts.read_nova_cpu_sets(conf)


def test_reserved_huge_pages_reach_the_report(tmp_path):
    layout = load_layout("dgx-a100-8gpu")
    write_tree(tmp_path, layout)
    conf = tmp_path / "nova.conf"
    conf.write_text("[DEFAULT]\nreserved_huge_pages = node:3,size:2048,count:100\n")
    cells = build_report("h", FakeNvml(layout), tmp_path, tmp_path / "proc", conf)["numa_cells"]
    assert cells[3]["mempages"][1] == {"size_kb": 2048, "total": 8192, "used": 0,
                                       "reserved": 100}


def test_a_kernel_without_numa_is_one_cell(tmp_path):
    (tmp_path / "sys/devices/system/cpu").mkdir(parents=True)
    (tmp_path / "sys/devices/system/cpu/online").write_text("0-3\n")
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/meminfo").write_text("MemTotal:       16384000 kB\n")
    fs = host_facts.Sysfs(tmp_path)
    [cell] = host_facts.numa_cells(fs, host_facts.NovaCpuSets())
    assert (cell["id"], cell["cpus"], cell["memory_mb"]) == (0, "0-3", 16000)


def test_nvml_bus_ids_are_normalised_to_the_sysfs_form():
    assert normalise_bus_id(b"00000000:3B:00.0") == "0000:3b:00.0"
    assert normalise_bus_id("00000009:01:00.0") == "0009:01:00.0"


def test_the_agent_imports_and_reports_without_nvidia_ml_py(tmp_path):
    """pynvml is imported lazily: blocked, the agent still reports the host and says why."""
    import subprocess
    import sys

    write_tree(tmp_path, load_layout("gh200"))
    code = ("import sys, json; sys.modules['pynvml'] = None\n"
            "from cortex.agent.cli import main\n"
            f"sys.exit(main(['--once', '--print', '--host', 'h', '--sysfs-root', '{tmp_path}',"
            f" '--proc-root', '{tmp_path / 'proc'}']))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["nvml_error"] == "nvidia-ml-py (pynvml) is not installed"
    assert report["gpus"][0]["pci_address"] == "0009:01:00.0"
