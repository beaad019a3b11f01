"""The Nova side of the weigher differential: upstream Nova's weigher handler and weighers.

Runs only inside the Nova virtualenv (:mod:`tests.differential.nova_venv`); imports nothing
of Cortex. Reads ``{"hosts": [...], "group"?: {"policy", "members", "hosts"}}`` as JSON on
stdin, each host with the facts Nova's default weighers read (``host``, ``free_ram_mb``,
``vcpus_total``, ``vcpus_used``, ``cpu_allocation_ratio``, ``free_disk_mb``,
``hypervisor_version``, ``num_io_ops``, ``failed_builds``, ``free_pci``, ``instances``:
instance uuids on the host), builds a ``HostState`` of each in that order (the request's
server group from ``group``), and weighs
them with ``HostWeightHandler.get_weighed_objects`` over every class of
``nova.scheduler.weights.all_weighers()`` (Nova's default ``weight_classes``) under the
default configuration. Writes ``{"weights": {host: weight}, "order": [host, ...]}``: the
final weights and Nova's sorted order (stable: equal weights keep the input order).
"""

from __future__ import annotations

import json
import sys
import uuid
from types import SimpleNamespace

from nova import objects
from nova.conf import CONF

objects.register_all()

from nova.scheduler import host_manager, weights  # noqa: E402


def host_state(facts: dict) -> host_manager.HostState:
    """A HostState carrying ``facts`` as Nova's resource tracker would have set them."""
    state = host_manager.HostState(facts["host"], facts["host"], uuid.uuid4().hex)
    for name in ("free_ram_mb", "vcpus_total", "vcpus_used", "cpu_allocation_ratio",
                 "free_disk_mb", "hypervisor_version", "num_io_ops", "failed_builds"):
        setattr(state, name, facts[name])
    state.aggregates = []
    state.instances = dict.fromkeys(facts.get("instances", ()))
    state.metrics = []
    # PCIWeigher reads only the pools' counts (nova/scheduler/weights/pci.py)
    state.pci_stats = SimpleNamespace(pools=[{"count": facts["free_pci"]}]
                                      if facts["free_pci"] else [])
    return state


def main() -> None:
    CONF([], project="nova", default_config_files=[])
    asked = json.load(sys.stdin)
    hosts = [host_state(facts) for facts in asked["hosts"]]
    spec = objects.RequestSpec()
    group = asked.get("group")
    spec.instance_group = objects.InstanceGroup(
        policy=group["policy"], policies=[group["policy"]], members=group["members"],
        hosts=group["hosts"]) if group else None
    weighers = [cls() for cls in weights.all_weighers()]
    weighed = weights.HostWeightHandler().get_weighed_objects(weighers, hosts, spec)
    json.dump({"weights": {w.obj.host: w.weight for w in weighed},
               "order": [w.obj.host for w in weighed],
               "weighers": sorted(type(w).__name__ for w in weighers)}, sys.stdout)


if __name__ == "__main__":
    main()
