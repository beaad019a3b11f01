"""Time to compute the flavor capacity gauges on the benchmark GPU fleet.

Run: .venv/bin/python bench/capacity.py [--hosts 10000] [--seed 1]

The fleet is ``bench/gpu_fleet.py``'s (HGX H100, A100 with NVLink bridges, L40S, MIG,
vGPU; one zone), imported into an embedded SQLite database and loaded as a knowledge
view. The flavors are the benchmark bodies' shapes: 1, 2, 4 and 8 NVIDIA GPUs of any
model (8 pinned vCPUs and 64 GiB a GPU) and one vGPU. Prints, per flavor, the instances
placeable now and on the empty fleet and the seconds each took, then the seconds one
computation of every gauge took (:meth:`cortex.services.capacity.FlavorCapacity.refresh`,
what the API's thread does once per knowledge version).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from types import MappingProxyType

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_fleet  # noqa: E402

from cortex.conf import shipped_file  # noqa: E402
from cortex.db import migrate  # noqa: E402
from cortex.db.engine import make_engine  # noqa: E402
from cortex.knowledge.loader import load_view  # noqa: E402
from cortex.pipeline.config import load_pipelines  # noqa: E402
from cortex.request.devices import DeviceCatalog  # noqa: E402
from cortex.scheduler.service import SchedulerService  # noqa: E402
from cortex.services.capacity import FlavorCapacity, Shape, placeable  # noqa: E402
from cortex.store.fleet import import_fleet  # noqa: E402

ALIAS = '[{"name": "nvidia", "vendor_id": "10de", "device_type": "type-PCI"}]'


class Fixed:
    """The knowledge source of one view."""

    def __init__(self, view):
        self._view = view

    def view(self):
        """The view."""
        return self._view


def flavors() -> list[Shape]:
    """The benchmark bodies' shapes as synced flavors."""
    shapes = [Shape(8 * g, 65536 * g, g, flavor=f"g.{g}gpu", extra_specs=MappingProxyType({
        "hw:cpu_policy": "dedicated", "hw:numa_nodes": "1" if g <= 4 else "2",
        "pci_passthrough:alias": f"nvidia:{g}"})) for g in gpu_fleet.GPU_SIZES]
    shapes.append(Shape(8, 32768, 0, flavor="g.1vgpu", extra_specs=MappingProxyType({
        "hw:cpu_policy": "dedicated", "resources:VGPU": "1"})))
    return shapes


def main() -> None:
    """Build the fleet, time each flavor, then the whole computation."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        engine = make_engine(f"sqlite:///{tmp}/bench.sqlite")
        migrate.upgrade(engine)
        with engine.begin() as connection:
            import_fleet(connection, gpu_fleet.gpu_fleet(args.hosts, args.seed))
        view = load_view(engine)
        engine.dispose()
    devices = DeviceCatalog.from_json(ALIAS)
    scheduler = SchedulerService(load_pipelines(shipped_file("pipelines.yaml")), Fixed(view))
    gpus = sum(len(s.topology.gpus) for s in view.hosts.values() if s.topology)
    print(f"{len(view.hosts)} hosts, {gpus} GPUs")
    print(f"{'flavor':10} {'now':>7} {'empty':>7} {'seconds':>8}  limited by (now)")
    for shape in flavors():
        started = time.perf_counter()
        found = placeable(scheduler, shape, "az-1", limit=100_000, devices=devices, view=view)
        print(f"{shape.flavor:10} {found['placeable_now']:7d} {found['placeable_empty']:7d} "
              f"{time.perf_counter() - started:8.2f}  {found['limited_by']}")
    # the gauges' computation on a view of its own (nothing kept from the runs above)
    view = load_view_again(view)
    gauges = FlavorCapacity(SchedulerService(scheduler.pipelines, Fixed(view)), flavors,
                            devices, limit=100_000)
    started = time.perf_counter()
    gauges.refresh()
    print(f"every gauge ({len(flavors())} flavors x 1 zone x now/empty): "
          f"{time.perf_counter() - started:.2f} s")


def load_view_again(view):
    """A copy of ``view`` with nothing derived kept (as a new knowledge version has)."""
    from dataclasses import replace
    return replace(view, hosts=MappingProxyType(dict(view.hosts)))


if __name__ == "__main__":
    main()
