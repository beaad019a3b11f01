"""The stored network topology: the file (``cortex-manage network load``) and Prometheus.

The prometheus sync source writes its rows itself (the sync layer imports no
knowledge code, see :mod:`cortex.sync.sources.prometheus_network`); both tables say
where each row came from in ``source``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, delete, insert, select
from sqlalchemy.orm import Session

from cortex.db import models
from cortex.knowledge.fleet import bump_version
from cortex.knowledge.network import SOURCE_FILE, SOURCE_PROMETHEUS


def store_topology(connection: Connection, document: Mapping[str, Any]) -> dict[str, int]:
    """Replace the file-sourced domains and locations with ``document`` (a parse_topology result).

    One transaction (the caller's); bumps the knowledge version. Returns the counts
    written: ``{"spines": n, "leaves": n, "hosts": n}``. The file comes before Prometheus
    (issue #9), so Prometheus rows give way: its locations of hosts the file lists and
    its domains the file names are deleted; its other locations stay, those on a leaf
    the file (re)defines pointing at the file's leaf. The next prometheus sync agrees.
    """
    now = datetime.now(UTC)
    location = models.NetworkLocation.__table__
    domain = models.NetworkDomain.__table__
    file_hosts = {host for leaf in document["leaves"].values() for host in leaf["hosts"]}
    file_names = set(document["spines"]) | set(document["leaves"])
    kept = [row for row in connection.execute(
        select(location.c.host, location.c.leaf, location.c.updated_at)
        .where(location.c.source == SOURCE_PROMETHEUS)).mappings()
        if row["host"] not in file_hosts]
    # deleting domains cascades to the locations on them; ``kept`` puts them back below
    connection.execute(delete(location).where(location.c.source.in_(
        (SOURCE_FILE, SOURCE_PROMETHEUS))))
    connection.execute(delete(domain).where(
        (domain.c.source == SOURCE_FILE)
        | ((domain.c.source == SOURCE_PROMETHEUS) & domain.c.name.in_(file_names))))
    spines = [{"name": name, "kind": "spine", "spine": None, "block": None,
               "uplink_gbps": (value or {}).get("uplink_gbps"), "adjacent": None,
               "source": SOURCE_FILE, "updated_at": now}
              for name, value in document["spines"].items()]
    leaves = [{"name": name, "kind": "leaf", "spine": leaf.get("spine"),
               "block": leaf.get("block"), "uplink_gbps": leaf.get("uplink_gbps"),
               "adjacent": list(leaf["adjacent"]) if "adjacent" in leaf else None,
               "source": SOURCE_FILE, "updated_at": now}
              for name, leaf in document["leaves"].items()]
    hosts = [{"host": host, "leaf": name, "source": SOURCE_FILE, "updated_at": now}
             for name, leaf in document["leaves"].items() for host in leaf["hosts"]]
    for table, rows in ((domain, spines + leaves), (location, hosts)):
        if rows:
            connection.execute(insert(table), rows)
    leaf_names = set(connection.execute(select(domain.c.name).where(domain.c.kind == "leaf"))
                     .scalars())
    kept = [{**row, "source": SOURCE_PROMETHEUS} for row in kept if row["leaf"] in leaf_names]
    if kept:
        connection.execute(insert(location), kept)
    bump_version(connection)
    return {"spines": len(spines), "leaves": len(leaves), "hosts": len(hosts)}


def read_topologies(session: Session) -> dict[str, dict[str, Any]]:
    """The stored domains and locations by source, each as a parse_topology-shaped document.

    ``{source: {"spines": {name: {"uplink_gbps"}}, "leaves": {name: {...,"hosts"}}}}``
    (``file``, ``prometheus``; a source with no rows is absent). A source's locations
    on a leaf another source defines appear under that leaf with only their hosts.
    """
    documents: dict[str, dict[str, Any]] = {}

    def document(source: str) -> dict[str, Any]:
        return documents.setdefault(source, {"spines": {}, "leaves": {}})

    for row in session.scalars(select(models.NetworkDomain)).all():
        if row.kind == "spine":
            document(row.source)["spines"][row.name] = {"uplink_gbps": row.uplink_gbps}
            continue
        leaf: dict[str, Any] = {"hosts": []}
        for key in ("spine", "block", "uplink_gbps", "adjacent"):
            if getattr(row, key) is not None:
                leaf[key] = getattr(row, key)
        document(row.source)["leaves"][row.name] = leaf
    for row in session.scalars(select(models.NetworkLocation)
                               .order_by(models.NetworkLocation.host)).all():
        leaves = document(row.source)["leaves"]
        leaves.setdefault(row.leaf, {"hosts": []})["hosts"].append(row.host)
    return documents
