"""The stored network topology: the file (``cortex-manage network load``) and Prometheus.

The one writer of ``network_domains`` and ``network_locations``: :func:`store_topology`
for the file, :func:`replace_source_rows` for the rows a sync source computed
(:mod:`cortex.sync.sources.prometheus_network`). Both tables say where each row came
from in ``source``; the knowledge loader reads them back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, delete, insert, select, update

from cortex.db import models
from cortex.knowledge.network import SOURCE_FILE, SOURCE_PROMETHEUS
from cortex.store.version import bump_version


@dataclass
class Written:
    """What one replacement did to one table: rows wanted, rows inserted or updated, deleted."""

    rows: int = 0
    upserted: int = 0
    deleted: int = 0


def store_topology(connection: Connection, document: Mapping[str, Any]) -> dict[str, int]:
    """Replace the file-sourced domains and locations with ``document`` (a parse_topology result).

    One transaction (the caller's); bumps the knowledge version. Returns the counts
    written: ``{"spines": n, "leaves": n, "hosts": n}``. The file comes before Prometheus
    (:mod:`cortex.knowledge.network`), so Prometheus rows give way: its locations of
    hosts the file lists and its domains the file names are deleted; its other locations
    stay, those on a leaf the file (re)defines pointing at the file's leaf. The next
    prometheus sync agrees.
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


def earlier_rows(connection, source: str) -> tuple[set[str], dict[str, str]]:
    """``(hosts, {domain name: kind})`` stored by sources other than ``source``."""
    hosts = set(connection.execute(select(models.NetworkLocation.host)
                                   .where(models.NetworkLocation.source != source)).scalars())
    domains = dict(connection.execute(
        select(models.NetworkDomain.name, models.NetworkDomain.kind)
        .where(models.NetworkDomain.source != source)).all())
    return hosts, domains


def replace_source_rows(connection, source: str, domains: Mapping[str, Mapping[str, Any]],
                 hosts: Mapping[str, Mapping[str, Any]]) -> dict[str, Written]:
    """Make the rows of ``source`` in both tables exactly ``domains`` and ``hosts``.

    Only rows that differ are written (``updated_at`` says when a row last changed), so
    an unchanged fabric changes nothing and does not bump the knowledge version.
    Domains are written first and deleted last, and updated in place, so no location
    ever points at a missing leaf and the ``ON DELETE CASCADE`` of
    ``network_locations.leaf`` never drops one. Returns the counts by table name.
    """
    now = datetime.now(UTC)
    domain_table = models.NetworkDomain.__table__
    location_table = models.NetworkLocation.__table__
    counts = {domain_table.name: _write(connection, domain_table, "name", source, domains, now),
              location_table.name: _write(connection, location_table, "host", source, hosts,
                                          now)}
    for table, key, wanted in ((location_table, "host", hosts),
                               (domain_table, "name", domains)):
        gone = [name for name in _stored(connection, table, key, source) if name not in wanted]
        if gone:
            counts[table.name].deleted = connection.execute(delete(table).where(
                table.c.source == source, table.c[key].in_(gone))).rowcount
    return counts


def _stored(connection, table, key: str, source: str) -> dict[str, dict[str, Any]]:
    """``{key: row}`` of ``source``'s rows in ``table``, without key and timestamp."""
    columns = [c for c in table.c if c.name not in (key, "updated_at")]
    return {row[0]: dict(zip((c.name for c in columns), row[1:], strict=True))
            for row in connection.execute(select(table.c[key], *columns)
                                          .where(table.c.source == source))}


def _write(connection, table, key: str, source: str, wanted: Mapping[str, Mapping[str, Any]],
           now: datetime) -> Written:
    """Insert the ``wanted`` rows ``table`` lacks, update those that differ; the counts."""
    stored = _stored(connection, table, key, source)
    new = [{key: name, **row, "updated_at": now} for name, row in wanted.items()
           if name not in stored]
    if new:
        connection.execute(insert(table), new)
    changed = [name for name, row in wanted.items() if name in stored and stored[name] != row]
    for name in changed:
        connection.execute(update(table).where(table.c[key] == name)
                           .values(**wanted[name], updated_at=now))
    return Written(rows=len(wanted), upserted=len(new) + len(changed))
