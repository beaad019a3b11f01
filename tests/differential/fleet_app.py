"""An app over its own fresh database holding a given fleet, for tests that need topology.

The session database carries the demo fleet that other tests rank; importing a fleet
replaces the whole knowledge snapshot, so these tests take a scratch database
(``empty_database_url``), migrate it and import their hosts there.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from cortex import conf
from cortex.api.app import create_app
from cortex.db import migrate
from cortex.db.engine import make_engine
from cortex.store.fleet import import_fleet

#: The differential's pipeline: the filters that stand in for Nova's NUMATopologyFilter and
#: PciPassthroughFilter, and the trait filter (the bodies carry Nova's pre-filter traits).
STEPS = ("filter_has_requested_traits", "filter_gpu_capacity", "filter_numa_topology",
         "filter_pci_numa_affinity")
#: Cortex's ``[gpu] pci_alias``: the aliases nova_side.py configures in Nova's ``[pci] alias``.
ALIASES = [{"name": "h100", "vendor_id": "10de", "product_id": "2330"},
           {"name": "a100", "vendor_id": "10de", "product_id": "20b5"},
           {"name": "l40s", "vendor_id": "10de", "product_id": "26b9",
            "numa_policy": "required"},
           {"name": "nic", "vendor_id": "8086", "product_id": "1520", "numa_policy": "socket"},
           {"name": "pf", "vendor_id": "8086", "product_id": "1572", "device_type": "type-PF",
            "numa_policy": "preferred"}]


def fleet_host(name: str, report: Mapping[str, Any], index: int = 0, cpu_ratio: float = 1.0,
               ram_ratio: float = 1.0, traits: Sequence[str] = ()) -> dict[str, Any]:
    """A fleet-file host with VCPU/MEMORY_MB ratios, ``traits`` and a topology ``report``."""
    return {"host": name, "uuid": f"00000000-0000-0000-0000-{index:012d}",
            "hypervisor_type": "QEMU", "traits": list(traits),
            "inventories": {"VCPU": {"total": 64, "allocation_ratio": cpu_ratio},
                            "MEMORY_MB": {"total": 262144, "allocation_ratio": ram_ratio}},
            "topology": {"report": dict(report)}}


@contextmanager
def fleet_app(database_url: str, hosts: Sequence[Mapping[str, Any]],
              filters: Sequence[str | Mapping[str, Any]], workdir: Path,
              aggregates: Sequence[Mapping[str, Any]] = (), **overrides: Any) -> Iterator[Any]:
    """A Flask app whose Nova default pipeline runs ``filters`` over ``hosts`` (fleet hosts).

    ``filters``: step names, or pipeline steps (``{"name", "options"}``); ``aggregates``:
    fleet-file aggregates. ``overrides``: more ``{"section.option": value}`` settings.
    Closes the decision writer and the engine on exit.
    """
    engine = make_engine(database_url)
    migrate.upgrade(engine)
    with engine.begin() as connection:
        import_fleet(connection, {"hosts": [dict(h) for h in hosts],
                                  "aggregates": [dict(a) for a in aggregates]})
    pipelines = workdir / "pipelines.yaml"
    steps = [{"name": f} if isinstance(f, str) else dict(f) for f in filters]
    pipelines.write_text(yaml.safe_dump({"defaults": {"nova": "p"}, "pipelines": {"p": {
        "service": "nova", "filters": steps}}}))
    settings = {"api.auth_strategy": "noauth", "scheduler.reservation_ttl": 0.0,
                "database.connection": database_url, "database.knowledge_check_interval": 0.0,
                "scheduler.pipelines_file": str(pipelines)} | overrides
    app = create_app(conf.load(environ={}, overrides=settings), engine=engine)
    try:
        yield app
    finally:
        app.extensions["cortex"].decisions.close()
        engine.dispose()


