"""Sync fixtures: a database of their own, real Placement and Prometheus, fake Nova & co.

The sync commits, so these tests cannot share the session database (which holds
the demo fleet for the API tests): they get ``cortex_sync_<pid>``, emptied before
each test. The real servers fail the tests (they never skip) when they cannot be
had; ``.ci/run`` installs them.
"""

from __future__ import annotations

import uuid as uuidlib

import pytest
import requests
from sqlalchemy import text

from cortex import conf as config
from cortex.db import migrate
from cortex.db.engine import make_engine
from cortex.db.models import Base
from cortex.store import reservation_feed
from tests.conftest import _create_postgres_database, _drop_postgres_database
from tests.fake_openstack import FakeCloud, FakeOpenStack
from tests.real_servers import ServerUnavailable, start_placement, stop

KEEP = {"knowledge_version", "alembic_version"}


@pytest.fixture(scope="session")
def sync_database_url():
    """A migrated PostgreSQL database for the sync tests (PostgreSQL is required)."""
    url = _create_postgres_database("sync")  # advisory locks, real transactions
    engine = make_engine(url)
    migrate.upgrade(engine)
    engine.dispose()
    yield url
    reservation_feed.stop_all()  # their listeners would retry the dropped database
    _drop_postgres_database(url)


@pytest.fixture(scope="session")
def sync_engine_session(sync_database_url):
    engine = make_engine(sync_database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def sync_engine(sync_engine_session):
    """The sync database's engine, every table emptied and the version back to 0."""
    tables = ", ".join(t for t in Base.metadata.tables if t not in KEEP)
    with sync_engine_session.begin() as connection:
        connection.execute(text(f"TRUNCATE {tables} CASCADE"))
        connection.execute(text("UPDATE knowledge_version SET version = 0"))
    return sync_engine_session


class PlacementClient:
    """Builds a cloud through Placement's own REST API (admin token, microversion 1.39).

    Remembers provider generations from Placement's answers and the custom
    resource classes and traits it created, to spare calls.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.session = requests.Session()
        self.session.headers.update({"X-Auth-Token": "admin",
                                     "OpenStack-API-Version": "placement 1.39"})
        self.generations: dict[str, int] = {}
        self.custom: set[str] = set()

    def call(self, method: str, path: str, body=None, expect=(200, 201, 204)):
        response = self.session.request(method, self.url + path, json=body, timeout=30)
        assert response.status_code in expect, (method, path, response.text)
        return response.json() if response.content else None

    def generation(self, uuid: str) -> int:
        if uuid not in self.generations:
            self.generations[uuid] = self.call("GET", f"/resource_providers/{uuid}")["generation"]
        return self.generations[uuid]

    def _put_generation(self, uuid: str, what: str, body: dict) -> None:
        answer = self.call("PUT", f"/resource_providers/{uuid}/{what}",
                           {"resource_provider_generation": self.generation(uuid), **body})
        self.generations[uuid] = answer["resource_provider_generation"]

    def _custom(self, kind: str, names) -> None:
        for name in names:
            if name.startswith("CUSTOM_") and (kind, name) not in self.custom:
                self.call("PUT", f"/{kind}/{name}", expect=(201, 204))
                self.custom.add((kind, name))

    def provider(self, name: str, parent: str | None = None, uuid: str | None = None) -> str:
        uuid = uuid or str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, name))
        self.call("POST", "/resource_providers",
                  {"name": name, "uuid": uuid, "parent_provider_uuid": parent})
        self.generations[uuid] = 0
        return uuid

    def inventories(self, uuid: str, inventories: dict[str, dict]) -> None:
        self._custom("resource_classes", inventories)
        self._put_generation(uuid, "inventories", {"inventories": inventories})

    def traits(self, uuid: str, traits: list[str]) -> None:
        self._custom("traits", traits)
        self._put_generation(uuid, "traits", {"traits": traits})

    def aggregates(self, uuid: str, aggregates: list[str]) -> None:
        self._put_generation(uuid, "aggregates", {"aggregates": aggregates})

    def allocate(self, consumer: str, allocations: dict[str, dict[str, int]],
                 project: str = "p" * 32, user: str = "u" * 32) -> None:
        current = self.call("GET", f"/allocations/{consumer}")
        self.call("PUT", f"/allocations/{consumer}", {
            "allocations": {rp: {"resources": res} for rp, res in allocations.items()},
            "project_id": project, "user_id": user,
            "consumer_generation": current.get("consumer_generation"),
            "consumer_type": "INSTANCE"})
        self.generations.clear()

    def free(self, consumer: str) -> None:
        self.call("DELETE", f"/allocations/{consumer}", expect=(204, 404))
        self.generations.clear()

    def reset(self) -> None:
        """Delete every allocation and provider (children before parents)."""
        providers = self.call("GET", "/resource_providers")["resource_providers"]
        consumers = set()
        for provider in providers:
            consumers |= set(self.call(
                "GET", f"/resource_providers/{provider['uuid']}/allocations")["allocations"])
        for consumer in consumers:
            self.free(consumer)
        depth = {p["uuid"]: 0 for p in providers}
        parents = {p["uuid"]: p["parent_provider_uuid"] for p in providers}
        for uuid in depth:
            node = uuid
            while parents.get(node):
                depth[uuid] += 1
                node = parents[node]
        for uuid in sorted(depth, key=depth.get, reverse=True):
            self.call("DELETE", f"/resource_providers/{uuid}", expect=(204, 404))
        self.generations.clear()


@pytest.fixture(scope="session")
def placement_server(tmp_path_factory):
    """The real OpenStack Placement (PyPI) on a loopback port; its base URL."""
    try:
        process, url = start_placement(tmp_path_factory.mktemp("placement"))
    except ServerUnavailable as exc:
        pytest.fail(str(exc))
    yield url
    stop(process)


@pytest.fixture(scope="session")
def placement_client(placement_server):
    return PlacementClient(placement_server)


@pytest.fixture
def placement(placement_client):
    """A client of the real Placement, emptied before the test."""
    placement_client.reset()
    return placement_client


@pytest.fixture
def fake_cloud():
    """An empty FakeCloud; tests fill it (its placement_url defaults to the fake one)."""
    return FakeCloud()


@pytest.fixture
def openstack(fake_cloud):
    """The fake Keystone/Nova/Cinder/Manila serving ``fake_cloud`` on a loopback port."""
    with FakeOpenStack(fake_cloud) as fake:
        yield fake


def sync_conf(database_url: str, fake: FakeOpenStack | None = None, **overrides):
    """A Config for the sync database, pointing openstacksdk at ``fake``'s Keystone."""
    values = {"database.connection": database_url, **(fake.clouds_yaml_auth() if fake else {})}
    values.update({k.replace("__", "."): v for k, v in overrides.items()})
    return config.load(environ={}, overrides=values)
