"""The descheduler in the simulator: whole NVLink cells won back after churn.

The shipped ``mixed`` fleet, a synthetic timeline (seed 2, load 0.9) replayed through
``kvm-gpu-topology-aware`` up to its 1,200th arrival: one HGX board is held by a single
4-GPU VM; moving it (to a board already broken up) frees a whole 8-GPU cell.
"""

import pytest

from cortex import conf
from cortex.pipeline.config import load_pipelines
from cortex.plugins.detectors.gpu_island import GpuIslandDetector
from cortex.scheduler.deschedule import Limits
from cortex.simulator.deschedule import free_cells, win_back
from cortex.simulator.fleet import read_fleet
from cortex.simulator.session import resolve_fleet
from cortex.simulator.trace import SyntheticSpec, synthetic_trace


@pytest.fixture(scope="module")
def scenario():
    fleet = read_fleet(resolve_fleet("mixed"))
    trace = synthetic_trace(fleet, SyntheticSpec(requests=1500, seed=2, load=0.9))
    pipelines = load_pipelines(conf.shipped_file("pipelines.yaml"))
    return fleet, trace, pipelines, trace[1200].arrival


def test_a_move_wins_back_a_whole_8_gpu_cell(scenario):
    fleet, trace, pipelines, stop = scenario
    result = win_back(fleet, trace, pipelines, "kvm-gpu-topology-aware", stop,
                      [GpuIslandDetector()])
    assert result.instances > 0 and result.failed == 0
    assert result.moves and all(m.gpus_won > 0 and m.state == "planned" for m in result.moves)
    assert result.cells_after > result.cells_before
    assert result.whole_gpus_after > result.whole_gpus_before
    assert len({m.instance_uuid for m in result.moves}) == len(result.moves)  # once each


def test_without_moves_nothing_changes(scenario):
    fleet, trace, pipelines, stop = scenario
    result = win_back(fleet, trace, pipelines, "kvm-gpu-topology-aware", stop,
                      [GpuIslandDetector()], passes=0)
    assert result.moves == [] and result.cells_after == result.cells_before


def test_proposed_moves_are_not_made(scenario):
    fleet, trace, pipelines, stop = scenario
    result = win_back(fleet, trace, pipelines, "kvm-gpu-topology-aware", stop,
                      [GpuIslandDetector()], limits=Limits(max_moves=20))
    assert result.moves == [] and result.cells_after == result.cells_before


def test_free_cells_counts_only_boards_with_8_gpu_nvlink_cliques(scenario):
    from cortex.simulator.cloud import SimCloud

    fleet = scenario[0]
    view = SimCloud(fleet).view()
    hgx = [h for h in fleet.hosts if h.name.startswith("hgx")]
    assert free_cells(view, 8) == len(hgx) > 0
