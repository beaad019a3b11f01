"""Differential: filter_live_migration against upstream Nova 34.0.0's conductor checks.

Nova decides a live migration's destination in ``nova/conductor/tasks/live_migrate.py``:
``LiveMigrationTask._check_destination_is_not_source`` and
``_check_compatible_with_source_hypervisor`` (same hypervisor type; the destination's
hypervisor version not older than the source's). :data:`NOVA_SIDE` runs in the Nova
virtualenv: from a fixed seed it draws hosts (one compute node each, as real
``objects.ComputeNode``) and source/destination pairs, and calls those two methods on a
``LiveMigrationTask`` whose only mock is the compute-node lookup (a DB read), answering
the drawn objects. Here the same hosts become Cortex HostStates and the filter judges
each pair. Every pair must agree. CPU architecture and CPU features are the driver's
``check_can_live_migrate_destination`` (an RPC to the destination), not compared here:
every drawn host has the same architecture and no CPU features.

Size: ``CORTEX_LIVE_MIGRATION_PAIRS`` (default 3000), ``CORTEX_DIFFERENTIAL_SEED``
(default 1), 40 hosts.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from cortex.knowledge.view import HostState, Inventory, NodeState
from cortex.plugins.filters.live_migration import LiveMigrationFilter, LiveMigrationOptions
from tests.differential.nova_venv import NovaUnavailable, nova_venv

SEED = int(os.environ.get("CORTEX_DIFFERENTIAL_SEED", "1"))
PAIRS = int(os.environ.get("CORTEX_LIVE_MIGRATION_PAIRS", "3000"))
HOSTS = 40

#: Runs in the Nova virtualenv; argv: seed, pairs, hosts. Prints one JSON line per host
#: (``kind: host``) and per pair (``kind: pair``, ``nova``: Nova accepts the destination).
NOVA_SIDE = r'''
import json, random, sys
from unittest import mock
from nova import exception, objects
objects.register_all()
from nova.conf import CONF
from nova.conductor.tasks.live_migrate import LiveMigrationTask
CONF([], project="nova", default_config_files=[])
seed, pairs, hosts = (int(x) for x in sys.argv[1:4])
rng = random.Random(seed)
types = ("QEMU", "QEMU", "QEMU", "qemu", "VMware vCenter Server", "ironic")
versions = (8000000, 8002000, 9000000, 10001000)
fleet = {}
for i in range(hosts):
    host = {"host": f"lm{i:03d}", "hypervisor_type": rng.choice(types),
            "hypervisor_version": rng.choice(versions)}
    fleet[host["host"]] = host
    print(json.dumps({"kind": "host", **host}))
nodes = {name: objects.ComputeNode(host=name, hypervisor_hostname=name,
                                   hypervisor_type=h["hypervisor_type"],
                                   hypervisor_version=h["hypervisor_version"])
         for name, h in fleet.items()}
names = sorted(fleet)
for n in range(pairs):
    source = rng.choice(names)
    destination = source if rng.random() < 0.05 else rng.choice(names)
    task = LiveMigrationTask.__new__(LiveMigrationTask)
    task.context, task.source, task.destination = mock.sentinel.context, source, destination
    task.instance = mock.Mock(uuid="00000000-0000-0000-0000-000000000001")
    task._get_compute_info = nodes.__getitem__
    try:
        task._check_destination_is_not_source()
        task._check_compatible_with_source_hypervisor(destination)
        verdict, why = True, None
    except (exception.UnableToMigrateToSelf, exception.InvalidHypervisorType,
            exception.DestinationHypervisorTooOld) as exc:
        verdict, why = False, type(exc).__name__
    print(json.dumps({"kind": "pair", "id": n, "source": source,
                      "destination": destination, "nova": verdict, "why": why}))
'''


def nova_lines(seed: int, pairs: int) -> list[dict]:
    """The Nova side's JSON lines; fails the test if it fails."""
    try:
        python = nova_venv() / "bin" / "python"
    except NovaUnavailable as exc:
        pytest.fail(str(exc))
    done = subprocess.run([str(python), "-c", NOVA_SIDE, str(seed), str(pairs), str(HOSTS)],
                          capture_output=True, text=True, check=False)
    if done.returncode:
        pytest.fail(f"Nova side failed: {done.stderr[-3000:]}")
    return [json.loads(line) for line in done.stdout.splitlines()]


def host_state(fact: dict) -> HostState:
    """A Cortex HostState with one x86_64 node carrying the drawn hypervisor facts."""
    node = NodeState(node=fact["host"], uuid=fact["host"],
                     hypervisor_type=fact["hypervisor_type"],
                     hypervisor_version=fact["hypervisor_version"], cpu_arch="x86_64",
                     traits=frozenset(), inventories={"VCPU": Inventory(total=64)})
    return HostState(host=fact["host"], availability_zone=None, enabled=True, up=True,
                     disabled_reason=None, aggregates=(), nodes={node.node: node},
                     traits=frozenset())


def test_live_migration_decides_as_nova_conductor():
    """Zero false accepts, zero false rejects over the drawn pairs; both verdicts occur."""
    lines = nova_lines(SEED, PAIRS)
    hosts = {x["host"]: host_state(x) for x in lines if x["kind"] == "host"}
    pairs = [x for x in lines if x["kind"] == "pair"]
    false_accepts, false_rejects = [], []
    for pair in pairs:
        step = LiveMigrationFilter(LiveMigrationOptions())
        step.source = hosts[pair["source"]]
        cortex = step.check(hosts[pair["destination"]], None, None) is None
        if cortex != pair["nova"]:
            (false_accepts if cortex else false_rejects).append(pair)
    assert not false_accepts and not false_rejects, (
        f"{len(false_accepts)} false accepts, {len(false_rejects)} false rejects of "
        f"{len(pairs)}; first: {(false_accepts[:3] + false_rejects[:3])}")
    assert len(pairs) == PAIRS
    reasons = {x["why"] for x in pairs}
    assert {None, "UnableToMigrateToSelf", "InvalidHypervisorType",
            "DestinationHypervisorTooOld"} <= reasons, reasons
