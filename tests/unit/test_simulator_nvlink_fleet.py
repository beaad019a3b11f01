"""The fleet-level NVLink-complete share: which multi-GPU placements it counts, and how."""

import pytest
import yaml

from cortex import conf
from cortex.pipeline.config import load_pipelines
from cortex.simulator.cloud import SimCloud
from cortex.simulator.fleet import read_fleet
from cortex.simulator.replay import nvlink_reach, nvlink_reachable, replay
from cortex.simulator.report import summary, table
from cortex.simulator.trace import read_trace
from tests.gpu_fakes import BOARDS

PIPELINES = load_pipelines(conf.shipped_file("pipelines.yaml"))
A100, L40S, H100 = "20b5", "26b9", "2330"


def write(tmp_path, hosts, requests):
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump({"boards": BOARDS, "hosts": hosts}))
    trace = tmp_path / "trace.yaml"
    trace.write_text(yaml.safe_dump({"requests": requests}))
    return read_fleet(fleet), read_trace(trace)


def guest(name, arrival, gpus, product, departure=None):
    """A guest with a cell on each of the board's two NUMA nodes: its GPUs may sit on either."""
    found = {"id": name, "arrival": arrival, "gpus": gpus, "vcpus": 4 * gpus,
             "memory_mb": 16384 * gpus, "products": [product], "numa_nodes": 2}
    if departure is not None:
        found["departure"] = departure
    return found


def test_the_reach_is_the_largest_linked_set_per_model_on_whole_boards(tmp_path):
    fleet, _ = write(tmp_path, [
        {"prefix": "a100", "count": 2, "board": "a100-pcie-4gpu-nvlink-pairs"},
        {"prefix": "l40s", "count": 1, "board": "l40s-4gpu-pcie"},
        {"prefix": "hgx", "count": 1, "board": "hgx-h100-8gpu"}], [])
    cloud = SimCloud(fleet)
    reach = nvlink_reach(cloud)
    assert reach == {("10de", A100): 2, ("10de", L40S): 1, ("10de", H100): 8}
    # busy GPUs do not change it: it is the boards' capacity
    host = cloud.hosts["hgx-000"]
    host.gpus_in_use.update(g.pci_address for g in host.base.gpus[:7])
    assert nvlink_reach(cloud) == reach
    assert nvlink_reachable(reach, [A100], 2) and not nvlink_reachable(reach, [A100], 4)
    assert not nvlink_reachable(reach, [L40S], 2)
    assert nvlink_reachable(reach, [L40S, H100], 4)        # any accepted model will do
    assert nvlink_reachable(reach, [], 8)                 # no product: any NVIDIA GPU
    assert not nvlink_reachable(reach, [], 2, vendor="1002")
    assert nvlink_reachable(reach, ["20B5"], 2)           # ids compared case-insensitively


@pytest.mark.parametrize("pipeline", ["kvm-gpu-topology-aware", "nova-baseline"])
def test_a_request_no_host_could_link_is_left_out(tmp_path, pipeline):
    fleet, trace = write(tmp_path, [
        {"prefix": "a100", "count": 1, "board": "a100-pcie-4gpu-nvlink-pairs"},
        {"prefix": "l40s", "count": 1, "board": "l40s-4gpu-pcie"}], [
        guest("pcie4", 0, 4, L40S),        # PCIe-only model: never NVLink
        guest("pair", 1, 2, A100)])        # an A100 pair: NVLink
    run = replay(fleet, trace, PIPELINES, pipeline)
    d = {x.request_id: x for x in run.decisions}
    assert d["pcie4"].host == "l40s-000" and d["pair"].host == "a100-000"
    assert (d["pcie4"].nvlink, d["pcie4"].nvlink_fleet_possible) == (False, False)
    assert (d["pair"].nvlink, d["pair"].nvlink_fleet_possible) == (True, True)
    assert run.nvlink_share == 0.5                  # all multi-GPU placements
    assert run.nvlink_fleet_share == 1.0            # the L40S one left out


def test_a_placement_that_missed_a_set_the_fleet_has_counts_against(tmp_path):
    # Nova's tracker hands GPUs out in address order: one-GPU guests take 0, 1, 2, 3 of
    # the A100 (pairs 0-1 and 2-3); the guests on 1 and 2 leave, so the 2-GPU guest that
    # comes next gets 1 and 2, one of each pair. No pair was free when it came (the
    # per-decision share leaves it out), but the board has pairs: it counts against.
    fleet, trace = write(tmp_path, [
        {"prefix": "a100", "count": 1, "board": "a100-pcie-4gpu-nvlink-pairs"},
        {"prefix": "l40s", "count": 1, "board": "l40s-4gpu-pcie"}], [
        guest("g0", 0, 1, A100), guest("g1", 1, 1, A100, departure=5),
        guest("g2", 2, 1, A100, departure=5), guest("g3", 3, 1, A100),
        guest("split", 6, 2, A100),
        guest("pcie2", 7, 2, L40S)])
    run = replay(fleet, trace, PIPELINES, "nova-baseline")
    d = {x.request_id: x for x in run.decisions}
    a100 = [g.pci_address for g in SimCloud(fleet).hosts["a100-000"].base.gpus]
    assert [d[g].devices for g in ("g0", "g1", "g2", "g3")] == [(a,) for a in a100]
    assert d["split"].devices == (a100[1], a100[2])
    assert (d["split"].nvlink, d["split"].nvlink_possible,
            d["split"].nvlink_fleet_possible) == (False, False, True)
    assert d["pcie2"].nvlink_fleet_possible is False
    assert run.nvlink_possible_share is None        # no placement had a free pair
    assert run.nvlink_fleet_share == 0.0            # the split one counts against
    found = summary([[run]])["nova-baseline"]
    assert (found["nvlink_complete_pct"], found["nvlink_fleet_pct"]) == (None, 0.0)
    header, _, row = table([run]).splitlines()
    cells = dict(zip(header.strip("| ").split(" | "), row.strip("| ").split(" | "),
                     strict=True))
    assert cells["all NVLink where the fleet has such a set"] == "0.0 %"
    assert cells["all NVLink where possible"] == "n/a"
