"""In-process fake Keystone, Nova, Cinder and Manila (and a read-only Placement for benchmarks).

They answer in the upstream formats of ``tests/fixtures/openstack-api`` at the
microversion the client asks for (``OpenStack-API-Version`` in, the same header
out): Nova's hypervisors drop their usage fields at 2.88, servers carry their
flavor inline from 2.47, flavors their extra specs from 2.61, server groups a
single ``policy`` from 2.64; Manila's ``services`` and ``availability-zones`` exist
from 2.7 (``X-OpenStack-Manila-API-Version``; 404 below, as Manila answers); servers
and migrations take ``changes-since`` (deleted servers are listed only then, as Nova
does); lists page at ``max_limit`` (1000) with
``<key>_links`` ``next`` links carrying ``limit`` and ``marker``. Keystone issues
the token ``admin`` (what Placement's ``noauth2`` strategy takes for an admin) and
a catalog whose placement endpoint can be a real Placement server.

A :class:`FakeCloud` holds the data as plain upstream-shaped dicts; tests change
them between syncs. ``hold`` blocks a path until released (to kill a sync in the
middle), ``fail`` answers 500 for a path prefix.

Nova also moves servers, as its API does for an admin: ``os-migrateLive`` (a host
given, not forced) and ``migrate`` (a host given: 2.56) answer 202 and start a
migration record (``os-migrations``, which takes ``instance_uuid``); the move ends after
``FakeCloud.move_reads`` reads of the server (``GET /servers/<id>``): a live migration
ACTIVE on the target, a cold one ``VERIFY_RESIZE`` there until ``confirmResize``.
Servers named in ``FakeCloud.refuse_moves`` are refused (400, Nova's "No valid host"
answer) and those in ``failing_moves`` end back on their source with the migration in
``error``.
"""

from __future__ import annotations

import copy
import json
import threading
import uuid as uuidlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from flask import Flask, Response, jsonify, request
from werkzeug.serving import WSGIRequestHandler, make_server

from tests.conftest import FIXTURES

API_SAMPLES = FIXTURES / "openstack-api"
PROJECT_ID = "6f70656e737461636b20342065766572"
TOKEN = "admin"
MAX_LIMIT = 1000


def sample(path: str) -> dict[str, Any]:
    """One upstream API sample, e.g. ``nova/servers_v2.100_servers-details-resp.json``."""
    return json.loads((API_SAMPLES / path).read_text())


def mv(text: str) -> tuple[int, int]:
    """``"2.53"`` -> ``(2, 53)``."""
    major, minor = text.split(".")
    return int(major), int(minor)


@dataclass
class FakeCloud:
    """Upstream-shaped records of one cloud, served by :class:`FakeOpenStack`."""

    services: list[dict] = field(default_factory=list)
    hypervisors: list[dict] = field(default_factory=list)
    servers: list[dict] = field(default_factory=list)
    deleted_servers: list[dict] = field(default_factory=list)
    flavors: list[dict] = field(default_factory=list)
    aggregates: list[dict] = field(default_factory=list)
    server_groups: list[dict] = field(default_factory=list)
    migrations: list[dict] = field(default_factory=list)
    cinder_pools: list[dict] = field(default_factory=list)
    cinder_services: list[dict] = field(default_factory=list)
    manila_pools: list[dict] = field(default_factory=list)
    manila_services: list[dict] = field(default_factory=list)
    # Manila's availability zones: {"id", "name", "created_at", "updated_at"}.
    manila_zones: list[dict] = field(default_factory=list)
    domains: list[dict] = field(default_factory=list)
    projects: list[dict] = field(default_factory=list)
    # Read-only Placement (benchmarks): providers with "inventories", "usages", "traits",
    # "aggregates" keys next to the upstream provider fields.
    providers: list[dict] = field(default_factory=list)
    nova_max_microversion: str = "2.100"  # Nova 34's (tests/nova_loop reads it there)
    placement_url: str | None = None
    # Moves (see the module doc): reads until a move ends, servers refused or failing.
    move_reads: int = 1
    refuse_moves: set[str] = field(default_factory=set)
    failing_moves: set[str] = field(default_factory=set)
    moving: dict[str, dict] = field(default_factory=dict)

    def add_compute_host(self, host: str, node: str | None = None, *, zone: str = "az-1",
                         node_uuid: str | None = None, status: str = "enabled",
                         state: str = "up", disabled_reason: str | None = None,
                         hypervisor_type: str = "QEMU", host_ip: str = "10.0.0.1") -> str:
        """A nova-compute service and its hypervisor; the node uuid (= root provider uuid)."""
        node_uuid = node_uuid or str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, node or host))
        service_id = str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, host))
        self.services.append({
            "id": service_id, "binary": "nova-compute", "host": host, "zone": zone,
            "status": status, "state": state, "disabled_reason": disabled_reason,
            "forced_down": False, "updated_at": "2026-11-21T00:00:00.000000"})
        self.hypervisors.append({
            "id": node_uuid, "hypervisor_hostname": node or host,
            "hypervisor_type": hypervisor_type, "hypervisor_version": 8002000,
            "host_ip": host_ip, "state": state, "status": status, "uptime": None,
            "service": {"host": host, "id": service_id, "disabled_reason": disabled_reason},
            "cpu_info": {"arch": "x86_64", "model": "SapphireRapids", "vendor": "Intel",
                         "features": ["avx512f", "amx-tile", "vmx"],
                         "topology": {"cores": 56, "threads": 2, "sockets": 2}}})
        return node_uuid

    def add_provider(self, uuid: str, name: str, root: str, parent: str | None,
                     inventories: dict[str, tuple[int, float, int]],
                     traits: list[str] = (), aggregates: list[str] = ()) -> dict:
        """A read-only Placement provider; ``inventories`` maps a class to (total, ratio, used)."""
        provider = {
            "uuid": uuid, "name": name, "generation": 1, "root_provider_uuid": root,
            "parent_provider_uuid": parent, "traits": list(traits),
            "aggregates": list(aggregates),
            "inventories": {rc: {"total": t, "reserved": 0, "min_unit": 1, "max_unit": t,
                                 "step_size": 1, "allocation_ratio": r}
                            for rc, (t, r, _) in inventories.items()},
            "usages": {rc: u for rc, (_, _, u) in inventories.items()}}
        self.providers.append(provider)
        return provider

    def add_server(self, server_uuid: str, host: str | None, node: str | None = None,
                   flavor: dict | None = None, **fields: Any) -> dict:
        """A server shaped like the 2.100 servers detail sample, on ``host``/``node``."""
        server = copy.deepcopy(_SERVER_TEMPLATE)
        server.update({
            "id": server_uuid, "name": f"vm-{server_uuid[:8]}",
            "OS-EXT-SRV-ATTR:host": host, "OS-EXT-SRV-ATTR:hypervisor_hostname": node or host,
            "flavor": flavor or copy.deepcopy(_SERVER_TEMPLATE["flavor"])})
        server.update(fields)
        self.servers.append(server)
        return server

    def delete_server(self, server_uuid: str, at: str | None = None) -> dict:
        """Delete a server as Nova does: kept in ``deleted_servers`` for changes-since."""
        server = next(s for s in self.servers if s["id"] == server_uuid)
        self.servers.remove(server)
        server.update({"status": "DELETED", "OS-EXT-STS:vm_state": "deleted",
                       "OS-EXT-STS:task_state": None, "updated": at or now_iso()})
        self.deleted_servers.append(server)
        return server


def now_iso() -> str:
    """Now, as Nova writes ``updated`` (ISO 8601, UTC, ``Z``)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _changed_since(rows: list[dict], since: str | None, key: str) -> list[dict]:
    """Nova's ``changes-since``: the rows updated at or after it (all rows without it)."""
    if since is None:
        return rows
    after = _time(since)
    return [r for r in rows if _time(r.get(key) or r.get("created") or r.get("created_at"))
            >= after]


def _time(value: str) -> datetime:
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


_SERVER_TEMPLATE = sample("nova/servers_v2.100_servers-details-resp.json")["servers"][0]


class KeepAliveHandler(WSGIRequestHandler):
    """HTTP/1.1 with keep-alive (as the real APIs behind their proxies), no access log."""

    protocol_version = "HTTP/1.1"

    def log_request(self, *args, **kwargs) -> None:
        """Quiet: the test keeps its own request log (``FakeOpenStack.requests``)."""


class FakeOpenStack:
    """A werkzeug server on a free loopback port serving ``cloud``; ``url`` is its base."""

    def __init__(self, cloud: FakeCloud) -> None:
        self.cloud = cloud
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, microversion)
        self.holds: dict[str, threading.Event] = {}
        self.held = threading.Event()
        self.failures: set[str] = set()
        self.app = _build_app(self)
        self._server = make_server("127.0.0.1", 0, self.app, threaded=True,
                                   request_handler=KeepAliveHandler)
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FakeOpenStack:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        for event in self.holds.values():
            event.set()
        self._server.shutdown()

    def hold(self, path_with_query: str) -> threading.Event:
        """Block requests whose path and query contain the text until the event is set."""
        event = threading.Event()
        self.holds[path_with_query] = event
        return event

    def clouds_yaml_auth(self) -> dict[str, str]:
        """The ``[openstack]`` options that point openstacksdk at this fake Keystone."""
        return {"openstack.auth_url": f"{self.url}/identity/v3", "openstack.username": "admin",
                "openstack.password": "secret", "openstack.project_name": "admin",
                "openstack.region_name": "RegionOne"}


def _build_app(fake: FakeOpenStack) -> Flask:
    """The Flask app of all services, prefixed /identity, /compute, /volume, /share, /placement."""
    app = Flask("fake-openstack")
    cloud = fake.cloud

    @app.before_request
    def record():
        wanted = request.headers.get("OpenStack-API-Version")
        fake.requests.append((request.method, request.path, wanted))
        target = request.full_path
        for text, event in list(fake.holds.items()):
            if text in target:
                fake.held.set()
                event.wait(60)
        if any(target.startswith(prefix) for prefix in fake.failures):
            return jsonify(computeFault={"code": 500, "message": "injected failure"}), 500
        return None

    # --- Keystone ------------------------------------------------------------------
    def identity_version():
        return {"id": "v3.14", "status": "stable", "updated": "2020-04-07T00:00:00Z",
                "links": [{"rel": "self", "href": f"{fake.url}/identity/v3/"}],
                "media-types": [{"base": "application/json",
                                 "type": "application/vnd.openstack.identity-v3+json"}]}

    @app.get("/identity")
    @app.get("/identity/")
    def identity_versions():
        return jsonify(versions={"values": [identity_version()]}), 300

    @app.get("/identity/v3")
    @app.get("/identity/v3/")
    def identity_root():
        return jsonify(version=identity_version())

    @app.post("/identity/v3/auth/tokens")
    def issue_token():
        body = {"token": {
            "methods": ["password"], "expires_at": "2099-01-01T00:00:00.000000Z",
            "issued_at": "2026-11-21T00:00:00.000000Z", "audit_ids": ["fake"],
            "user": {"id": "admin", "name": "admin",
                     "domain": {"id": "default", "name": "Default"}},
            "project": {"id": PROJECT_ID, "name": "admin",
                        "domain": {"id": "default", "name": "Default"}},
            "roles": [{"id": "r1", "name": "admin"}], "catalog": _catalog(fake)}}
        response = jsonify(body)
        response.status_code = 201
        response.headers["X-Subject-Token"] = TOKEN
        return response

    @app.get("/identity/v3/domains")
    def list_domains():
        return jsonify(domains=cloud.domains, links={"self": request.url, "next": None})

    @app.get("/identity/v3/projects")
    def list_projects():
        return jsonify(projects=cloud.projects, links={"self": request.url, "next": None})

    # --- Nova ------------------------------------------------------------------------
    def compute_version():
        return {"id": "v2.1", "status": "CURRENT", "version": cloud.nova_max_microversion,
                "min_version": "2.1", "updated": "2013-07-23T11:33:21Z",
                "links": [{"rel": "self", "href": f"{fake.url}/compute/v2.1/"}]}

    def nova_microversion() -> tuple[int, int]:
        header = request.headers.get("OpenStack-API-Version", "")
        legacy = request.headers.get("X-OpenStack-Nova-API-Version")
        wanted = header.split()[-1] if header.startswith("compute") else legacy or "2.1"
        if wanted == "latest":
            wanted = cloud.nova_max_microversion
        return mv(wanted)

    def nova_answer(body: dict, status: int = 200) -> Response:
        version = nova_microversion()
        response = jsonify(body)
        response.status_code = status
        response.headers["OpenStack-API-Version"] = f"compute {version[0]}.{version[1]}"
        response.headers["X-OpenStack-Nova-API-Version"] = f"{version[0]}.{version[1]}"
        response.headers["Vary"] = "OpenStack-API-Version, X-OpenStack-Nova-API-Version"
        return response

    @app.get("/compute")
    @app.get("/compute/")
    def compute_versions():
        return jsonify(versions=[compute_version()])

    @app.get("/compute/v2.1")
    @app.get("/compute/v2.1/")
    def compute_root():
        return jsonify(version=compute_version())

    @app.before_request
    def check_nova_microversion():
        if request.path.startswith("/compute/v2.1/") and request.path != "/compute/v2.1/":
            if nova_microversion() > mv(cloud.nova_max_microversion):
                return jsonify(computeFault={"code": 406, "message": "Version not supported"}), 406
        return None

    @app.get("/compute/v2.1/os-services")
    def list_services():
        binary = request.args.get("binary")
        return nova_answer({"services": [s for s in cloud.services
                                         if binary in (None, s["binary"])]})

    @app.get("/compute/v2.1/os-hypervisors/detail")
    def list_hypervisors():
        version = nova_microversion()
        return nova_answer(_page(cloud.hypervisors, "hypervisors",
                                 "/compute/v2.1/os-hypervisors/detail",
                                 show=lambda h: _hypervisor_at(h, version)))

    @app.get("/compute/v2.1/servers/detail")
    def list_servers():
        if request.args.get("all_tenants") not in ("1", "True", "true"):
            return nova_answer({"servers": []})
        version = nova_microversion()
        since = request.args.get("changes-since")  # deleted servers too, as Nova does
        rows = _changed_since(cloud.servers + cloud.deleted_servers if since else cloud.servers,
                              since, "updated")
        return nova_answer(_page(rows, "servers", "/compute/v2.1/servers/detail",
                                 show=lambda s: _server_at(s, version)))

    def find_server(server_id: str) -> dict | None:
        return next((s for s in cloud.servers if s["id"] == server_id), None)

    def not_found() -> Response:
        return nova_answer({"itemNotFound": {"code": 404, "message": "Instance could not "
                                                                    "be found."}}, 404)

    @app.get("/compute/v2.1/servers/<server_id>")
    def show_server(server_id):
        server = find_server(server_id)
        if server is None:
            return not_found()
        move = cloud.moving.get(server_id)
        if move is not None and move["reads"] > 0:
            move["reads"] -= 1
            if move["reads"] == 0:
                _end_move(cloud, server, move)
        return nova_answer({"server": _server_at(server, nova_microversion())})

    @app.post("/compute/v2.1/servers/<server_id>/action")
    def server_action(server_id):
        server = find_server(server_id)
        if server is None:
            return not_found()
        body = request.get_json(force=True)
        if "confirmResize" in body:
            if server["status"] != "VERIFY_RESIZE":
                return nova_answer({"conflictingRequest": {"code": 409, "message": (
                    "Cannot 'confirmResize' instance while it is in vm_state "
                    f"{server['OS-EXT-STS:vm_state']}")}}, 409)
            server.update({"status": "ACTIVE", "OS-EXT-STS:vm_state": "active",
                           "OS-EXT-STS:task_state": None, "updated": now_iso()})
            move = cloud.moving.pop(server_id, None)
            for migration in [move["migration"]] if move else [
                    m for m in cloud.migrations if m["instance_uuid"] == server_id][-1:]:
                migration["status"] = "confirmed"
            return Response(status=204)
        kind = "live" if "os-migrateLive" in body else "cold" if "migrate" in body else None
        if kind is None:
            return nova_answer({"badRequest": {"code": 400, "message": "unknown action"}}, 400)
        args = body.get("os-migrateLive") or body.get("migrate") or {}
        if not args.get("host") or args.get("force"):
            return nova_answer({"badRequest": {"code": 400, "message": (
                "the fake takes only moves to a named host, not forced")}}, 400)
        if server["OS-EXT-STS:task_state"] or server_id in cloud.moving:
            return nova_answer({"conflictingRequest": {"code": 409, "message": (
                "Cannot 'migrate' instance while it is in task_state "
                f"{server['OS-EXT-STS:task_state']}")}}, 409)
        if server_id in cloud.refuse_moves:
            return nova_answer({"badRequest": {"code": 400, "message": (
                "No valid host was found. There are not enough hosts available.")}}, 400)
        migration = {"id": len(cloud.migrations) + 1, "uuid": str(uuidlib.uuid4()),
                     "instance_uuid": server_id,
                     "migration_type": "live-migration" if kind == "live" else "migration",
                     "status": "running" if kind == "live" else "migrating",
                     "source_compute": server["OS-EXT-SRV-ATTR:host"],
                     "source_node": server["OS-EXT-SRV-ATTR:hypervisor_hostname"],
                     "dest_compute": args["host"], "dest_node": args["host"],
                     "dest_host": None, "old_instance_type_id": 1, "new_instance_type_id": 1,
                     "project_id": server.get("tenant_id"), "user_id": server.get("user_id"),
                     "created_at": now_iso(), "updated_at": now_iso()}
        cloud.migrations.append(migration)
        cloud.moving[server_id] = {"kind": kind, "target": args["host"],
                                   "reads": cloud.move_reads, "migration": migration,
                                   "fail": server_id in cloud.failing_moves}
        server.update({"OS-EXT-STS:task_state": "migrating" if kind == "live"
                       else "resize_migrating", "updated": now_iso()})
        if kind == "cold":
            server["status"] = "RESIZE"
        return Response(status=202)

    @app.get("/compute/v2.1/flavors/detail")
    def list_flavors():
        version = nova_microversion()
        return nova_answer(_page(cloud.flavors, "flavors", "/compute/v2.1/flavors/detail",
                                 show=lambda f: _flavor_at(f, version)))

    @app.get("/compute/v2.1/flavors/<flavor_id>/os-extra_specs")
    def flavor_extra_specs(flavor_id):
        for flavor in cloud.flavors:
            if str(flavor["id"]) == flavor_id:
                return nova_answer({"extra_specs": flavor.get("extra_specs") or {}})
        return nova_answer({"itemNotFound": {"code": 404, "message": "no flavor"}}, 404)

    @app.get("/compute/v2.1/os-aggregates")
    def list_aggregates():
        return nova_answer({"aggregates": cloud.aggregates})

    @app.get("/compute/v2.1/os-server-groups")
    def list_server_groups():
        version = nova_microversion()
        limit = int(request.args.get("limit", MAX_LIMIT))
        offset = int(request.args.get("offset", 0))
        rows = [_group_at(g, version) for g in cloud.server_groups][offset:offset + limit]
        return nova_answer({"server_groups": rows})

    @app.get("/compute/v2.1/os-migrations")
    def list_migrations():
        version = nova_microversion()
        rows = cloud.migrations
        if request.args.get("instance_uuid"):
            rows = [m for m in rows if m["instance_uuid"] == request.args["instance_uuid"]]
        if version < (2, 59):
            return nova_answer({"migrations": [_migration_at(m, version) for m in rows]})
        rows = _changed_since(rows, request.args.get("changes-since"), "updated_at")
        return nova_answer(_page(rows, "migrations", "/compute/v2.1/os-migrations",
                                 "uuid", show=lambda m: _migration_at(m, version)))

    positions: dict[tuple, dict[str, int]] = {}

    def _position(rows: list[dict], id_key: str, marker: str) -> int | None:
        """Index after ``marker`` (cached per list content, so paging 200,000 rows is linear)."""
        shape = (id(rows), len(rows), rows[0][id_key] if rows else None,
                 rows[-1][id_key] if rows else None)
        if shape not in positions:
            positions.clear()
            positions[shape] = {str(r[id_key]): i for i, r in enumerate(rows)}
        found = positions[shape].get(marker)
        return None if found is None else found + 1

    def _page(rows: list[dict], key: str, path: str, id_key: str = "id",
              show=lambda row: row) -> dict:
        limit = min(int(request.args.get("limit", MAX_LIMIT)), MAX_LIMIT)
        start = 0
        marker = request.args.get("marker")
        if marker is not None:
            start = _position(rows, id_key, marker)
            if start is None:
                return {"badRequest": {"code": 400, "message": f"marker {marker} not found"}}
        page = [show(r) for r in rows[start:start + limit]]
        body: dict[str, Any] = {key: page}
        if len(page) == limit and start + limit < len(rows):
            query = urlencode([(k, v) for k, v in request.args.items()
                               if k not in ("marker", "limit")])
            body[f"{key}_links"] = [{"rel": "next", "href": (
                f"http://openstack.example.com{path}?{query + '&' if query else ''}"
                f"limit={limit}&marker={page[-1][id_key]}")}]
        return body

    # --- Cinder ------------------------------------------------------------------------
    def volume_versions():
        return {"versions": [{
            "id": "v3.0", "status": "CURRENT", "version": "3.70", "min_version": "3.0",
            "updated": "2023-08-31T00:00:00Z",
            "links": [{"rel": "self", "href": f"{fake.url}/volume/v3/"}]}]}

    @app.get("/volume")
    @app.get("/volume/")
    @app.get("/volume/v3")
    @app.get("/volume/v3/")
    @app.get(f"/volume/v3/{PROJECT_ID}")
    @app.get(f"/volume/v3/{PROJECT_ID}/")
    def volume_root():
        return jsonify(volume_versions())

    @app.get(f"/volume/v3/{PROJECT_ID}/scheduler-stats/get_pools")
    def cinder_pools():
        if request.args.get("detail") in ("True", "true", "1"):
            return jsonify(pools=cloud.cinder_pools)
        return jsonify(pools=[{"name": p["name"]} for p in cloud.cinder_pools])

    @app.get(f"/volume/v3/{PROJECT_ID}/os-services")
    def cinder_services():
        binary = request.args.get("binary")
        return jsonify(services=[s for s in cloud.cinder_services
                                 if binary in (None, s["binary"])])

    # --- Manila ------------------------------------------------------------------------
    def share_versions():
        return {"versions": [{
            "id": "v2.0", "status": "CURRENT", "version": "2.83", "min_version": "2.0",
            "updated": "2015-08-27T11:33:21Z",
            "links": [{"rel": "self", "href": f"{fake.url}/share/v2/"}]}]}

    @app.get("/share")
    @app.get("/share/")
    @app.get("/share/v2")
    @app.get("/share/v2/")
    def share_root():
        return jsonify(share_versions())

    def manila_microversion() -> tuple[int, int]:
        return mv(request.headers.get("X-OpenStack-Manila-API-Version") or "2.0")

    def manila_has(minimum: str) -> bool:
        """Whether the requested microversion has a URL of ``minimum`` and later."""
        return manila_microversion() >= mv(minimum)

    @app.get("/share/v2/scheduler-stats/pools/detail")
    def manila_pools():
        return jsonify(pools=cloud.manila_pools)

    @app.get("/share/v2/services")
    def manila_services():
        if not manila_has("2.7"):  # os-services before
            return Response(status=404)
        binary = request.args.get("binary")
        return jsonify(services=[s for s in cloud.manila_services
                                 if binary in (None, s["binary"])])

    @app.get("/share/v2/availability-zones")
    def manila_availability_zones():
        if not manila_has("2.7"):  # os-availability-zone before
            return Response(status=404)
        return jsonify(availability_zones=cloud.manila_zones)

    # --- Placement (read-only, for benchmarks) -------------------------------------------
    @app.get("/placement")
    @app.get("/placement/")
    def placement_root():
        return jsonify(versions=[{"id": "v1.0", "min_version": "1.0", "max_version": "1.39",
                                  "status": "CURRENT", "links": [{"rel": "self", "href": ""}]}])

    providers = {}

    def provider(uuid):
        if len(providers) != len(cloud.providers):
            providers.clear()
            providers.update({p["uuid"]: p for p in cloud.providers})
        return providers.get(uuid)

    @app.get("/placement/resource_providers")
    def list_providers():
        keys = ("uuid", "name", "generation", "root_provider_uuid", "parent_provider_uuid")
        required = request.args.get("required")
        return jsonify(resource_providers=[{k: p[k] for k in keys} for p in cloud.providers
                                           if required is None or required in p["traits"]])

    @app.get("/placement/traits")
    def list_traits():
        if request.args.get("associated") != "true":
            return jsonify(errors=[{"status": 400, "title": "only associated=true"}]), 400
        return jsonify(traits=sorted({t for p in cloud.providers for t in p["traits"]}))

    @app.get("/placement/resource_providers/<uuid>/<what>")
    def provider_detail(uuid, what):
        found = provider(uuid)
        if found is None or what not in ("inventories", "usages", "traits", "aggregates"):
            return jsonify(errors=[{"status": 404, "title": "Not Found"}]), 404
        return jsonify({what: found[what],
                        "resource_provider_generation": found["generation"]})

    return app


def _catalog(fake: FakeOpenStack) -> list[dict]:
    """The service catalog of the token: every fake service (and the placement URL)."""
    placement = fake.cloud.placement_url or f"{fake.url}/placement"
    entries = (("identity", "keystone", f"{fake.url}/identity/v3"),
               ("compute", "nova", f"{fake.url}/compute/v2.1"),
               ("placement", "placement", placement),
               ("volumev3", "cinderv3", f"{fake.url}/volume/v3/{PROJECT_ID}"),
               ("sharev2", "manilav2", f"{fake.url}/share/v2"))
    return [{"type": kind, "name": name, "id": name, "endpoints": [
        {"id": f"{name}-{interface}", "interface": interface, "region": "RegionOne",
         "region_id": "RegionOne", "url": url} for interface in ("public", "internal")]}
        for kind, name, url in entries]


def _hypervisor_at(hypervisor: dict, version: tuple[int, int]) -> dict:
    """A hypervisor as Nova shows it at ``version`` (usage fields and cpu_info before 2.88)."""
    shown = {k: v for k, v in hypervisor.items() if k != "cpu_info"}
    if version < (2, 88):
        shown.update(cpu_info=hypervisor.get("cpu_info"), vcpus=224, vcpus_used=0,
                     memory_mb=2097152, memory_mb_used=0, local_gb=3576, local_gb_used=0,
                     free_ram_mb=2097152, free_disk_gb=3576, current_workload=0,
                     running_vms=0, disk_available_least=3576)
        shown.pop("uptime", None)
    return shown


def _end_move(cloud: FakeCloud, server: dict, move: dict) -> None:
    """A move's end: on the target (live: ACTIVE; cold: VERIFY_RESIZE), or back (failing)."""
    migration = move["migration"]
    migration["updated_at"] = server["updated"] = now_iso()
    if move["fail"]:
        server.update({"status": "ACTIVE", "OS-EXT-STS:task_state": None})
        migration["status"] = "error"
        cloud.moving.pop(server["id"], None)
        return
    server.update({"OS-EXT-SRV-ATTR:host": move["target"],
                   "OS-EXT-SRV-ATTR:hypervisor_hostname": move["target"],
                   "OS-EXT-STS:task_state": None})
    if move["kind"] == "live":
        server["status"] = "ACTIVE"
        migration["status"] = "completed"
        cloud.moving.pop(server["id"], None)
    else:
        server.update({"status": "VERIFY_RESIZE", "OS-EXT-STS:vm_state": "resized"})
        migration["status"] = "finished"


def _server_at(server: dict, version: tuple[int, int]) -> dict:
    """A server at ``version``: the flavor inline from 2.47, a flavor reference before."""
    shown = dict(server)
    if version < (2, 47):
        shown["flavor"] = {"id": "1", "links": []}
    return shown


def _flavor_at(flavor: dict, version: tuple[int, int]) -> dict:
    """A flavor at ``version``: extra specs inline from 2.61, description from 2.55."""
    shown = dict(flavor)
    if version < (2, 61):
        shown.pop("extra_specs", None)
    if version < (2, 55):
        shown.pop("description", None)
    return shown


def _group_at(group: dict, version: tuple[int, int]) -> dict:
    """A server group at ``version``: ``policy`` + ``rules`` from 2.64, ``policies`` before."""
    shown = dict(group)
    if version < (2, 64):
        shown["policies"] = [shown.pop("policy")]
        shown.pop("rules", None)
        shown["metadata"] = {}
    return shown


def _migration_at(migration: dict, version: tuple[int, int]) -> dict:
    """A migration at ``version``: uuid from 2.59, project and user from 2.80."""
    shown = dict(migration)
    if version < (2, 59):
        shown.pop("uuid", None)
    if version < (2, 80):
        shown.pop("project_id", None)
        shown.pop("user_id", None)
    return shown
