"""Through the API: the six ways Cortex disagreed with upstream Nova 34, each fixed.

Each test posts Nova-shaped bodies to ``/scheduler/nova/external`` of an app whose fleet
holds hosts built for the case (tests/differential/fleet_app.py) and checks which hosts
come back. The rules are Nova 34.0.0's, cited where Cortex implements them.
"""

from __future__ import annotations

import logging

import pytest

from tests.differential.fleet_app import fleet_app, fleet_host
from tests.fakes import nova_body
from tests.topology_fakes import cell, gpu

NUMA = ("filter_numa_topology",)
PCI_NUMA = ("filter_gpu_capacity", "filter_numa_topology", "filter_pci_numa_affinity")


def report(cells, gpus=()):
    """A TopologyReport of report cells and GPUs."""
    return {"numa_cells": list(cells), "gpus": list(gpus), "gpu_links": []}


def guest(pcpus=2, memory=1024, pagesize=None, pci=None, hints=None, **spec):
    """``spec`` fields of a one-cell pinned guest; ``pci``: ``(count, numa_policy)``."""
    fields = {"numa_topology": {"cells": [{
        "id": 0, "cpuset": [], "pcpuset": list(range(pcpus)), "memory": memory,
        "pagesize": pagesize, "cpu_policy": "dedicated", "cpu_thread_policy": None}],
        "emulator_threads_policy": None},
        "pci_requests": {"requests": [] if pci is None else [{
            "count": pci[0], "numa_policy": pci[1], "alias_name": "h100",
            "spec": [{"vendor_id": "10de", "product_id": "2330", "dev_type": "type-PCI"}]}]},
        "scheduler_hints": hints or {}} | spec
    return fields


def answer(client, hosts, spec, flavor=None, **top):
    """The hosts Cortex keeps for a body over ``hosts``; the answer must be a 200."""
    body = nova_body("gpu-2xh100-pinned", hosts=hosts, spec=spec,
                     flavor={"vcpus": 2, "memory_mb": 1024, "extra_specs": {}} | (flavor or {}),
                     **{"rebuild": False, "resize": False, "live": False} | top)
    response = client.post("/scheduler/nova/external", json=body)
    assert response.status_code == 200, response.get_json()
    return set(response.get_json()["hosts"])


@pytest.fixture
def app_of(empty_database_url, tmp_path):
    """``app_of({name: (report, traits)}, filters)``: an app over those hosts."""
    opened = []

    def make(hosts, filters):
        manager = fleet_app(empty_database_url, [
            fleet_host(name, rep, i, traits=traits)
            for i, (name, (rep, traits)) in enumerate(hosts.items())], filters, tmp_path)
        opened.append(manager)
        return manager.__enter__()

    yield make
    for manager in opened:
        manager.__exit__(None, None, None)


# 1. nova/virt/hardware.py MEMPAGES_SMALL/LARGE/ANY = -1/-2/-3 in InstanceNUMACell.pagesize
def test_page_size_keywords_are_answered_by_the_page_pools(app_of):
    app = app_of({"huge": (report([cell(0, pages={2048: (1024, 0)})]), ()),
                  "small": (report([cell(0)]), ())}, NUMA)
    client = app.test_client()
    kept = {pagesize: answer(client, ["huge", "small"], guest(pagesize=pagesize))
            for pagesize in (-1, -2, -3)}
    assert kept == {-1: {"huge", "small"}, -2: {"huge"}, -3: {"huge", "small"}}


# 2. nova/pci/stats.py _filter_pools_for_numa_cells: the guest's own cells first
def test_socket_affinity_takes_local_devices_though_a_cell_reports_no_socket(app_of):
    app = app_of({
        "local": (report([cell(0, socket=None), cell(1, socket=0, pinned="8-15")],
                         [gpu("0000:3b:00.0", 0)]), ()),
        "remote": (report([cell(0, socket=None, pinned="0-7"), cell(1, socket=0)],
                          [gpu("0000:3b:00.0", 0)]), ()),
    }, PCI_NUMA)
    kept = answer(app.test_client(), ["local", "remote"], guest(pci=(1, "socket")))
    assert kept == {"local"}


# 3. nova/virt/hardware.py _numa_fit_instance_cell: with a page size, the pool decides
def test_pinned_guest_with_explicit_pages_is_judged_on_the_page_pool(app_of):
    app = app_of({
        "pool-free": (report([cell(0, memory=16384, memory_usage=16000,
                                   pages={2048: (4096, 0)})]), ()),
        "pool-used": (report([cell(0, memory=16384, pages={2048: (4096, 3000)})]), ()),
    }, NUMA)
    kept = answer(app.test_client(), ["pool-free", "pool-used"],
                  guest(memory=4096, pagesize=2048))
    assert kept == {"pool-free"}


# 4. VGPU: only what the knowledge positively rules out is refused
def test_vgpu_request_keeps_hosts_without_mig_or_vgpu_data(app_of):
    app = app_of({
        "no-data": (report([cell(0)]), ()),
        "mig-free": (report([cell(0)], [gpu("0000:3b:00.0", 0, mig=[("3g.40gb", False)])]),
                     ()),
        "mig-taken": (report([cell(0)], [gpu("0000:3b:00.0", 0, mig=[("3g.40gb", True)])]),
                      ()),
    }, ("filter_gpu_capacity",))
    kept = answer(app.test_client(), ["no-data", "mig-free", "mig-taken"],
                  {"numa_topology": None, "pci_requests": {"requests": []}},
                  flavor={"extra_specs": {"resources:VGPU": "1"}})
    assert kept == {"no-data", "mig-free"}


# 5. A claimed rebuild is believed only with the rebuild flag and force_hosts
def test_forged_rebuild_hint_at_create_is_filtered_logged_and_counted(app_of, caplog):
    app = app_of({"room": (report([cell(0)]), ()),
                  "full": (report([cell(0, pinned="0-7")]), ())}, NUMA)
    client = app.test_client()
    forged = guest(hints={"_nova_check_type": ["rebuild"]})
    with caplog.at_level(logging.WARNING, logger="cortex.scheduler.service"):
        assert answer(client, ["room", "full"], forged) == {"room"}
    assert "treated as a create" in caplog.text
    registry = app.extensions["cortex"].metrics.registry
    assert registry.get_sample_value("cortex_scheduler_disbelieved_intents_total",
                                     {"claimed": "rebuild"}) == 1.0
    genuine = guest(hints={"_nova_check_type": ["rebuild"]}, force_hosts=["full"],
                    force_nodes=["full"])
    assert answer(client, ["full"], genuine, rebuild=True) == {"full"}
    assert registry.get_sample_value("cortex_scheduler_disbelieved_intents_total",
                                     {"claimed": "rebuild"}) == 1.0


# 6. OWNER_NOVA required on root providers (Nova master); Nova 34 already reports it
def test_required_traits_keep_working_with_owner_nova(app_of):
    host_traits = {"unknown-owner": ["CUSTOM_GPU"], "nova": ["CUSTOM_GPU", "OWNER_NOVA"],
                   "cyborg": ["CUSTOM_GPU", "OWNER_CYBORG"], "no-custom": ["OWNER_NOVA"]}
    app = app_of({name: (report([cell(0)]), traits) for name, traits in host_traits.items()},
                 ("filter_has_requested_traits",))
    spec = {"numa_topology": None, "pci_requests": {"requests": []},
            "request_level_params": {"root_required": ["OWNER_NOVA"], "root_forbidden": []}}
    kept = answer(app.test_client(), list(host_traits), spec,
                  flavor={"extra_specs": {"trait:CUSTOM_GPU": "required"}})
    assert kept == {"unknown-owner", "nova"}
