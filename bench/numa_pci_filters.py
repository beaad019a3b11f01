"""Time of the NUMA and PCI filters per request over 1,000 hosts of 2 sockets and 8 GPUs each.

Run: .venv/bin/python bench/numa_pci_filters.py [--hosts 1000] [--repeat 20]
         [--database postgresql+psycopg://postgres@127.0.0.1:5432/bench]

Hosts are the HGX H100 agent report (etc/cortex/topology/hgx-h100-8gpu.json) with
random usage: GPUs in use, pinned CPUs and 1 GiB pages per cell, seeded so runs
compare. The topology is built once, as the knowledge view does per version; each
request then runs filter_gpu_capacity, filter_numa_topology and
filter_pci_numa_affinity over every host through the pipeline engine. Prints the
median and p99 milliseconds per request and per filter.

With ``--database`` (an empty database; it gets migrated and filled) it also stores
the reports through the knowledge layer and times a cold view load, storing one
changed report, re-posting an unchanged one, and the incremental reload after it.
"""

import argparse
import copy
import json
import random
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType

from cortex.cpuset import format_cpuset, parse_cpuset
from cortex.db import migrate
from cortex.db.engine import make_engine
from cortex.knowledge.loader import load_view
from cortex.knowledge.topology import topology_from_report
from cortex.knowledge.view import HostState, Inventory, KnowledgeView, NodeState
from cortex.pipeline.config import build_pipelines
from cortex.pipeline.engine import run_pipeline
from cortex.request import NovaRequest
from cortex.store.fleet import import_fleet
from cortex.store.reports import store_report

REPO = Path(__file__).resolve().parents[1]
REPORT = REPO / "etc/cortex/topology/hgx-h100-8gpu.json"
BODIES = ["gpu-2xh100-pinned", "gpu-8xh100-full-node", "gpu-1xa100-numa",
          "multi-create-anti-affinity"]
FILTERS = ("filter_gpu_capacity", "filter_numa_topology", "filter_pci_numa_affinity")


def host_report(base: dict, rng: random.Random) -> dict:
    """The base report with random GPUs in use, pinned CPUs and 1 GiB pages."""
    report = copy.deepcopy(base)
    for gpu in rng.sample(report["gpus"], rng.randint(0, 8)):
        gpu["in_use"] = True
    for cell in report["numa_cells"]:
        dedicated = sorted(parse_cpuset(cell["dedicated_cpus"]))
        cell["pinned_cpus"] = format_cpuset(dedicated[:rng.choice((0, 16, 32, 64, 96))])
        pages = 512
        used = rng.choice((0, 256, 512))
        cell["mempages"].append({"size_kb": 1048576, "total": pages, "used": used})
        cell["mempages"][0]["total"] -= pages * 1048576 // 4
        cell["memory_usage_mb"] = used * 1024
    return report


def build_view(hosts: int, seed: int = 7) -> KnowledgeView:
    """A view of ``hosts`` HGX hosts, topology precomputed."""
    base = json.loads(REPORT.read_text())
    rng = random.Random(seed)
    inventories = MappingProxyType({"VCPU": Inventory(16, allocation_ratio=2.0),
                                    "MEMORY_MB": Inventory(2097152)})
    states = {}
    for i in range(hosts):
        name = f"cmp{i:04d}"
        node = NodeState(f"{name}.cloud.example", f"uuid-{i}", "QEMU", 8002002, "x86_64",
                         frozenset(), inventories)
        states[name] = HostState(name, "az-1", True, True, None, (),
                                 MappingProxyType({node.node: node}), frozenset(),
                                 topology_from_report(host_report(base, rng)))
    return KnowledgeView(1, datetime.now(UTC), MappingProxyType(states))


def request(name: str, hosts: int) -> NovaRequest:
    """A bundled Nova body offering ``hosts`` candidates."""
    body = json.loads((REPO / "tests/fixtures/nova" / f"{name}.json").read_text())
    body["hosts"] = [{"host": f"cmp{i:04d}", "hypervisor_hostname": f"cmp{i:04d}.cloud.example"}
                     for i in range(hosts)]
    body["weights"] = {h["host"]: 0.0 for h in body["hosts"]}
    return NovaRequest.from_body(body)


def time_reloads(url: str, hosts: int) -> None:
    """Store ``hosts`` reports in the database at ``url`` and time the view's loads."""
    engine = make_engine(url)
    migrate.upgrade(engine)
    base, rng = json.loads(REPORT.read_text()), random.Random(7)
    reports = [host_report(base, rng) for _ in range(hosts)]
    with engine.begin() as connection:
        import_fleet(connection, {"hosts": [{"host": f"cmp{i:04d}", "uuid": f"u{i}"}
                                            for i in range(hosts)]})
        t0 = time.perf_counter()
        for i, report in enumerate(reports):
            store_report(connection, f"cmp{i:04d}", report, datetime.now(UTC), bump=False)
    print(f"stored {hosts} reports: {(time.perf_counter() - t0) * 1000 / hosts:.1f} ms each")
    t0 = time.perf_counter()
    cold = load_view(engine)
    print(f"cold view load: {time.perf_counter() - t0:.2f} s")
    changed = copy.deepcopy(reports[0])
    changed["gpus"][0]["in_use"] = not changed["gpus"][0].get("in_use")
    for label, report in (("changed", changed), ("unchanged", changed)):
        with engine.begin() as connection:
            t0 = time.perf_counter()
            moved = store_report(connection, "cmp0000", report, datetime.now(UTC))
        print(f"store one {label} report: {(time.perf_counter() - t0) * 1000:.0f} ms, "
              f"knowledge_changed={moved['knowledge_changed']}")
    t0 = time.perf_counter()
    load_view(engine, previous=cold)
    print(f"incremental view load (1 host changed): {time.perf_counter() - t0:.2f} s")
    engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--database", help="an empty database to time view loads on")
    args = parser.parse_args()
    if args.database:
        time_reloads(args.database, args.hosts)
    started = time.perf_counter()
    view = build_view(args.hosts)
    print(f"built {args.hosts} host topologies in {time.perf_counter() - started:.2f} s")
    pipeline = build_pipelines({"defaults": {"nova": "bench"}, "pipelines": {"bench": {
        "service": "nova", "filters": [{"name": n} for n in FILTERS]}}}).pipelines["bench"]
    print(f"{'body':28} {'kept':>5} {'p50 ms':>8} {'p99 ms':>8}  per filter p50 ms")
    for name in BODIES:
        wanted = request(name, args.hosts)
        samples, per_step = [], {n: [] for n in FILTERS}
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            result = run_pipeline(pipeline, wanted, view)
            samples.append((time.perf_counter() - t0) * 1000)
            for step in result.steps:
                per_step[step.name].append(step.duration_ms)
        samples.sort()
        p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
        steps = "  ".join(f"{n.removeprefix('filter_')} {statistics.median(v):.1f}"
                          for n, v in per_step.items())
        print(f"{name:28} {len(result.hosts):5d} {statistics.median(samples):8.1f} "
              f"{p99:8.1f}  {steps}")


if __name__ == "__main__":
    main()
