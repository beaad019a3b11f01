"""The HTTP floors, minimal Flask apps served by the same gunicorn settings as Cortex in
bench/latency.py.

``application``: parse the body, sort the hosts by the caller's weights, answer. It
parses and writes JSON with orjson (the ``bench`` extra), the fastest honest floor:
about 1.4x faster than the standard library at 1,000 hosts.

``promising``: the same (``$FLOOR_PROMISE_SECONDS``: how long a promise lives), and
before answering it promises the first host in the PostgreSQL database at
``$FLOOR_DATABASE_URL`` with Cortex's own statement
(:meth:`cortex.store.reservations.ReservationStore.reserve_if_unchanged`: the host's
lock, its reservations compared with those this process last saw there, the row written,
one round trip on a pooled connection; when another call wrote there since, the host's
reservations are read under its lock and the row written, two). The least a scheduler
must do that keeps its promises across workers and replicas in the database, as Cortex
does for every create; no other worker is told (Cortex's reservation feed is left out)."""

import os
import uuid
from datetime import UTC, datetime, timedelta
from functools import cache
from types import MappingProxyType

import orjson
from flask import Flask, Response, request

application = Flask("floor")
promising = Flask("promising-floor")


def _ranked(body: dict) -> list[str]:
    """The body's hosts, best weight first."""
    weights = body["weights"]
    return sorted(dict.fromkeys(h["host"] for h in body["hosts"]), key=lambda h: -weights[h])


@application.post("/scheduler/<service>/external")
def external(service):
    """Parse, sort by weight, answer: the least any external scheduler must do."""
    body = orjson.loads(request.get_data())
    return Response(orjson.dumps({"hosts": _ranked(body)}), mimetype="application/json")


@cache
def _promiser():
    """``promise(host, instance_uuid, resources) -> bool`` on ``$FLOOR_DATABASE_URL``.

    Cortex's reservation store with its own pool, built on the first call (the plain
    floor imports nothing of Cortex); True when the promise was written.
    """
    from cortex.db.engine import make_engine
    from cortex.knowledge.reservations import Reservation
    from cortex.store.reservations import ReservationStore

    store = ReservationStore(make_engine(os.environ["FLOOR_DATABASE_URL"]))
    life = timedelta(seconds=float(os.environ.get("FLOOR_PROMISE_SECONDS", "300")))
    known: dict[str, frozenset[str]] = {}  # host -> the ids this process saw there last

    def promise(host: str, instance_uuid: str, resources: dict[str, int]) -> bool:
        now = datetime.now(UTC)
        made = Reservation(str(uuid.uuid4()), host, instance_uuid, None,
                           MappingProxyType(resources), (), now, now + life)
        expected = known.get(host, frozenset())
        if not store.reserve_if_unchanged(made, now, expected, instance_uuid):
            with store.lock_host(host, now) as held:  # another call wrote: read, then write
                expected = frozenset(r.id for r in held.reservations
                                     if r.host == host and r.instance_uuid != instance_uuid)
                held.reserve(made)
        known[host] = expected | {made.id}
        return True

    return promise


@promising.post("/scheduler/<service>/external")
def external_promised(service):
    """Parse, sort by weight, promise the first host for the instance, answer."""
    body = orjson.loads(request.get_data())
    hosts = _ranked(body)
    data = body["spec"]["nova_object.data"]
    flavor = data["flavor"]["nova_object.data"]
    if not _promiser()(hosts[0], data["instance_uuid"],
                       {"VCPU": flavor["vcpus"], "MEMORY_MB": flavor["memory_mb"]}):
        return Response(b'{"error": "not promised"}', status=409, mimetype="application/json")
    return Response(orjson.dumps({"hosts": hosts}), mimetype="application/json")


@application.get("/healthcheck")
@promising.get("/healthcheck")
def healthcheck():
    """Ready."""
    return "OK"
