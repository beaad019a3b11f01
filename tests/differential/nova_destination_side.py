"""The Nova side of the destination differential: Nova's HostManager host selection.

Runs only inside the Nova virtualenv (:mod:`tests.differential.nova_venv`); imports nothing
of Cortex. ``python nova_destination_side.py --seed S --requests R --hosts H --candidates C``
writes JSON lines to stdout: ``{"kind": "host", "fleet": fleet host}`` per host (one node
each, named like the host or ``<host>.cloud.example``), then ``{"kind": "request", "id",
"destination", "ignore_hosts", "force_hosts", "force_nodes", "body", "nova": {host:
bool}}``: the hosts ``HostManager.get_filtered_hosts`` keeps with no filter enabled, i.e.
Nova's own handling of ``requested_destination`` (host, or host and node, as the
scheduler sees it after ``resources_from_request_spec``), ``ignore_hosts``,
``force_hosts`` and ``force_nodes``, names in mixed case.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import uuid

from nova import objects

objects.register_all()

from nova.scheduler import filters, host_manager  # noqa: E402
from nova_side import body_of, build_spec, configure  # noqa: E402


def make_host(rng: random.Random, index: int) -> dict:
    """One host with one node, named like the host or ``<host>.cloud.example``."""
    name = f"d{index:03d}"
    node = name if rng.random() < 0.5 else f"{name}.cloud.example"
    return {"host": name, "node": node, "uuid": str(uuid.UUID(int=index + 1)),
            "hypervisor_type": "QEMU",
            "inventories": {"VCPU": {"total": 64}, "MEMORY_MB": {"total": 262144}}}


def spelled(rng: random.Random, name: str) -> str:
    """``name`` as a caller may spell it: as is, or in upper case."""
    return name.upper() if rng.random() < 0.3 else name


def make_request(rng: random.Random, fleet: list[dict], chosen: list[dict]) -> dict:
    """Destination and host instructions of one request (names from ``chosen`` mostly)."""
    def pick() -> dict:
        return rng.choice(chosen if rng.random() < 0.7 else fleet)
    asked: dict = {"destination": None, "ignore_hosts": [], "force_hosts": [],
                   "force_nodes": []}
    kind = rng.choice(("none", "none", "host", "host+node", "host+other-node"))
    if kind != "none":
        target = pick()
        destination = {"host": target["host"]}
        if kind == "host+node":
            destination["node"] = target["node"]
        elif kind == "host+other-node":
            destination["node"] = pick()["node"]
        asked["destination"] = destination
    if rng.random() < 0.3:
        asked["ignore_hosts"] = [spelled(rng, pick()["host"]) for _ in range(rng.randint(1, 4))]
    if rng.random() < 0.2:
        asked["force_hosts"] = [spelled(rng, pick()["host"]) for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.15:
        asked["force_nodes"] = [spelled(rng, pick()["node"]) for _ in range(rng.randint(1, 2))]
    return asked


def kept(states: list, spec) -> set[str]:
    """The hosts Nova's ``HostManager.get_filtered_hosts`` keeps with no filter enabled."""
    manager = host_manager.HostManager.__new__(host_manager.HostManager)
    manager.filter_handler = filters.HostFilterHandler()
    manager.enabled_filters = []
    return {state.host for state in manager.get_filtered_hosts(states, spec)}


def generate(seed: int, requests: int, hosts: int, candidates: int, out) -> None:
    """Write the hosts, then each request with Nova's verdicts, as JSON lines."""
    configure()
    rng = random.Random(seed)
    fleet = [make_host(rng, i) for i in range(hosts)]
    for host in fleet:
        out.write(json.dumps({"kind": "host", "fleet": host}) + "\n")
    for made in range(requests):
        chosen = rng.sample(fleet, min(candidates, hosts))
        asked = make_request(rng, fleet, chosen)
        spec = build_spec({}, {}, {"vcpus": 1, "memory_mb": 512, "intent": "create",
                                   "id": made})
        if asked["destination"]:
            spec.requested_destination = objects.Destination(
                **{"node": None} | asked["destination"])  # the API sets both
        spec.ignore_hosts = asked["ignore_hosts"] or None
        spec.force_hosts = asked["force_hosts"] or None
        spec.force_nodes = asked["force_nodes"] or None
        states = []
        for host in chosen:
            state = host_manager.HostState(host["host"], host["node"], uuid.uuid4().hex)
            states.append(state)
        passing = kept(states, spec)
        body = body_of(spec, "create", [h["host"] for h in chosen])
        body["hosts"] = [{"host": h["host"], "hypervisor_hostname": h["node"]} for h in chosen]
        out.write(json.dumps({"kind": "request", "id": made, **asked, "body": body,
                              "nova": {h["host"]: h["host"] in passing for h in chosen}})
                  + "\n")


def main() -> None:
    """Command line: ``--seed --requests --hosts --candidates``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--requests", type=int, default=150)
    parser.add_argument("--hosts", type=int, default=60)
    parser.add_argument("--candidates", type=int, default=20)
    args = parser.parse_args()
    generate(args.seed, args.requests, args.hosts, args.candidates, sys.stdout)


if __name__ == "__main__":
    main()
