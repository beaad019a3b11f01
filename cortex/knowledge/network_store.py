"""The topology file in the knowledge tables: written by ``cortex-manage network load``."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, delete, insert, select
from sqlalchemy.orm import Session

from cortex.db import models
from cortex.knowledge.fleet import bump_version
from cortex.knowledge.network import SOURCE_FILE


def store_topology(connection: Connection, document: Mapping[str, Any]) -> dict[str, int]:
    """Replace the file-sourced domains and locations with ``document`` (a parse_topology result).

    One transaction (the caller's); bumps the knowledge version. Returns the counts
    written: ``{"spines": n, "leaves": n, "hosts": n}``.
    """
    now = datetime.now(UTC)
    connection.execute(delete(models.NetworkLocation)
                       .where(models.NetworkLocation.source == SOURCE_FILE))
    connection.execute(delete(models.NetworkDomain)
                       .where(models.NetworkDomain.source == SOURCE_FILE))
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
    for table, rows in ((models.NetworkDomain, spines + leaves),
                        (models.NetworkLocation, hosts)):
        if rows:
            connection.execute(insert(table), rows)
    bump_version(connection)
    return {"spines": len(spines), "leaves": len(leaves), "hosts": len(hosts)}


def read_topology(session: Session) -> dict[str, Any] | None:
    """The stored topology file as a parse_topology-shaped document (None: none stored)."""
    domains = session.scalars(select(models.NetworkDomain)).all()
    if not domains:
        return None
    hosts: dict[str, list[str]] = {}
    for row in session.scalars(select(models.NetworkLocation)).all():
        hosts.setdefault(row.leaf, []).append(row.host)
    document: dict[str, Any] = {"spines": {}, "leaves": {}}
    for row in domains:
        if row.kind == "spine":
            document["spines"][row.name] = {"uplink_gbps": row.uplink_gbps}
            continue
        leaf: dict[str, Any] = {"hosts": sorted(hosts.get(row.name, ()))}
        for key in ("spine", "block", "uplink_gbps", "adjacent"):
            if getattr(row, key) is not None:
                leaf[key] = getattr(row, key)
        document["leaves"][row.name] = leaf
    return document
