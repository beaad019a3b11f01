"""cortex-sync against upstream Nova 34 and Placement 16, compared with the hand-written fake.

The sync tests (``tests/sync/``) read a fake Nova written from the API reference
(``tests/fake_openstack.py``). Here the same reads go to the harness's real Nova, in a
state the fake's tests build by hand (servers on hosts, a server group, a cold
migration waiting for its confirmation, aggregates), and:

- every field the Nova source reads has, in the fake's answers for the same fleet,
  the type the real Nova gives it, at the microversion the sync negotiates;
- the knowledge built from the real Nova equals the knowledge built from a fake
  cloud holding the same facts;
- runs that read only Nova's changes (``changes-since``) leave the same knowledge as a
  full read, after creates, deletes and moves.
"""

from __future__ import annotations

import openstack
import pytest
from sqlalchemy import select, text

from cortex import conf as config
from cortex.db import migrate, models
from cortex.db.engine import make_engine
from cortex.sync.openstack import get_json, negotiate
from cortex.sync.runner import run_source
from cortex.sync.sources import build_sources
from cortex.sync.sources.nova import MINIMUM_MICROVERSION, WANTED_MICROVERSION
from tests.conftest import _create_postgres_database, _drop_postgres_database
from tests.fake_openstack import FakeCloud, FakeOpenStack
from tests.nova_loop.harness import CLOUD
from tests.nova_loop.test_nova_loop import H100X1, H100X2, NUMA_PINNED

#: Nova's lists the nova source reads (path, key, query) and the fields it reads there.
LISTS = {
    "services": ("/os-services", {"binary": "nova-compute"},
                 ("id", "host", "zone", "status", "state", "disabled_reason",
                  "forced_down")),
    "hypervisors": ("/os-hypervisors/detail", {},
                    ("id", "hypervisor_hostname", "service", "state", "status",
                     "hypervisor_type", "hypervisor_version", "host_ip")),
    "servers": ("/servers/detail", {"all_tenants": 1},
                ("id", "name", "OS-EXT-SRV-ATTR:host", "OS-EXT-SRV-ATTR:hypervisor_hostname",
                 "status", "OS-EXT-STS:vm_state", "OS-EXT-STS:task_state", "tenant_id",
                 "user_id", "OS-EXT-AZ:availability_zone", "flavor", "created", "updated")),
    "flavors": ("/flavors/detail", {"is_public": "None"},
                ("id", "name", "vcpus", "ram", "disk", "OS-FLV-EXT-DATA:ephemeral", "swap",
                 "os-flavor-access:is_public", "OS-FLV-DISABLED:disabled", "description",
                 "extra_specs")),
    "server_groups": ("/os-server-groups", {"all_projects": "True"},
                      ("id", "name", "policy", "rules", "members", "project_id", "user_id")),
    "migrations": ("/os-migrations", {},
                   ("uuid", "instance_uuid", "migration_type", "status", "source_compute",
                    "source_node", "dest_compute", "dest_node", "old_instance_type_id",
                    "new_instance_type_id", "project_id", "created_at", "updated_at")),
    "aggregates": ("/os-aggregates", {}, ("uuid", "name", "availability_zone", "metadata",
                                          "hosts")),
}
#: Knowledge tables the nova source writes, with the columns compared (all but ids).
TABLES = {
    models.Hypervisor: ("uuid", "node", "host", "state", "status", "disabled_reason",
                        "forced_down", "zone", "hypervisor_type", "host_ip"),
    models.Server: ("uuid", "name", "host", "node", "status", "vm_state", "task_state",
                    "project_id", "user_id", "availability_zone", "flavor_name", "flavor"),
    models.Flavor: ("id", "name", "vcpus", "ram", "disk", "ephemeral", "swap", "is_public",
                    "is_disabled", "description", "extra_specs"),
    models.ServerGroup: ("uuid", "name", "policy", "rules", "members", "project_id"),
    models.ServerMigration: ("uuid", "server_uuid", "migration_type", "status",
                             "source_compute", "source_node", "dest_compute", "dest_node",
                             "old_flavor_id", "new_flavor_id", "project_id"),
    models.Aggregate: ("uuid", "name", "availability_zone", "metadata"),
}


def json_type(value) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array",
            dict: "object", type(None): "null"}[type(value)]


def read_lists(compute) -> tuple[str, dict[str, list[dict]]]:
    """The negotiated microversion and every list the nova source reads, as answered."""
    version = negotiate(compute, WANTED_MICROVERSION, MINIMUM_MICROVERSION)
    return version, {kind: get_json(compute, path, version, query)[kind]
                     for kind, (path, query, _) in LISTS.items()}


def fake_of(answers: dict[str, list[dict]]) -> FakeCloud:
    """A fake cloud built as the sync tests build theirs, holding the same facts.

    Hosts and servers through the fake's builders (its own record shapes); flavors,
    server groups, migrations and aggregates, which the fake takes as upstream-shaped
    records, as the real Nova answered them.
    """
    cloud = FakeCloud(nova_max_microversion=WANTED_MICROVERSION)
    services = {s["id"]: s for s in answers["services"]}
    for hypervisor in answers["hypervisors"]:
        service = services[hypervisor["service"]["id"]]
        cloud.add_compute_host(
            service["host"], hypervisor["hypervisor_hostname"], zone=service["zone"],
            node_uuid=hypervisor["id"], status=service["status"], state=service["state"],
            disabled_reason=service["disabled_reason"],
            hypervisor_type=hypervisor["hypervisor_type"], host_ip=hypervisor["host_ip"])
        cloud.services[-1]["id"] = service["id"]
        cloud.hypervisors[-1]["service"]["id"] = service["id"]
        cloud.hypervisors[-1]["hypervisor_version"] = hypervisor["hypervisor_version"]
    for server in answers["servers"]:
        cloud.add_server(server["id"], server["OS-EXT-SRV-ATTR:host"],
                         server["OS-EXT-SRV-ATTR:hypervisor_hostname"], server["flavor"],
                         **{k: server[k] for k in LISTS["servers"][2]
                            if k not in ("flavor", "OS-EXT-SRV-ATTR:host",
                                         "OS-EXT-SRV-ATTR:hypervisor_hostname")})
    cloud.flavors = answers["flavors"]
    cloud.server_groups = answers["server_groups"]
    cloud.migrations = answers["migrations"]
    cloud.aggregates = answers["aggregates"]
    return cloud


def fake_connection(fake: FakeOpenStack):
    options = fake.clouds_yaml_auth()
    return openstack.connect(
        auth_type="password", region_name=options["openstack.region_name"],
        load_yaml_config=False, load_envvars=False,
        auth={"auth_url": options["openstack.auth_url"],
              "username": options["openstack.username"],
              "password": options["openstack.password"],
              "project_name": options["openstack.project_name"]})


def knowledge(engine) -> dict[str, set]:
    """The compared columns of every nova table, as sets of tuples."""
    with engine.connect() as connection:
        return {model.__tablename__: {
            tuple(repr(row[c]) for c in columns)
            for row in connection.execute(select(model.__table__)).mappings()}
            for model, columns in TABLES.items()}


@pytest.fixture
def busy(loop):
    """The loop with servers on three hosts, a group member, a migration awaiting confirm."""
    group = loop.nova.call("group", name="spread", policy="anti-affinity",
                           rules={"max_server_per_host": 2})
    loop.boot(loop.flavor("h100x1", **H100X1), name="member", group=group["id"])
    loop.boot(loop.flavor("h100x2", **H100X2), name="pair")
    moving = loop.boot(loop.flavor("numa2", **NUMA_PINNED), name="moving")[0]
    loop.move("migrate", server=moving["id"], confirm=False)
    yield loop
    loop.nova.call("confirm", server=moving["id"])


@pytest.fixture
def fake_database():
    url = _create_postgres_database("novaloopfake")
    engine = make_engine(url)
    migrate.upgrade(engine)
    yield url, engine
    engine.dispose()
    _drop_postgres_database(url)


def test_the_fake_answers_in_the_shape_nova_does(busy):
    """Each field the nova source reads, in each list: present in the real Nova's answer
    and the fake's for the same facts, with the same JSON type, at the negotiated
    microversion."""
    version, real = read_lists(openstack.connect(cloud=CLOUD).compute)
    assert version == WANTED_MICROVERSION  # Nova 34 speaks 2.100
    assert real["migrations"] and real["server_groups"] and len(real["servers"]) == 3
    with FakeOpenStack(fake_of(real)) as fake:
        fake_version, faked = read_lists(fake_connection(fake).compute)
    assert fake_version == version
    differences = []
    for kind, (_, _, fields) in LISTS.items():
        assert len(faked[kind]) == len(real[kind]), kind
        for field in fields:
            real_types = {json_type(r.get(field)) for r in real[kind] if field in r}
            fake_types = {json_type(r.get(field)) for r in faked[kind] if field in r}
            if not real_types:
                differences.append(f"{kind}.{field}: not in Nova's answer")
            elif not real_types <= fake_types | {"null"} or not fake_types:
                differences.append(f"{kind}.{field}: Nova {sorted(real_types)}, "
                                   f"fake {sorted(fake_types)}")
    assert differences == []


def test_the_knowledge_from_nova_is_the_knowledge_from_the_fake(busy, fake_database):
    """Synced from the real Nova, and from a fake cloud holding the same facts: the
    nova tables hold the same rows."""
    busy.sync()
    _, real = read_lists(openstack.connect(cloud=CLOUD).compute)
    url, engine = fake_database
    with FakeOpenStack(fake_of(real)) as fake:
        conf = config.load(environ={}, overrides={
            "database.connection": url, "sync.sources": "nova",
            **fake.clouds_yaml_auth()})
        result = run_source(engine, build_sources(conf, ("nova",))[0])
    assert result.ok, result.error
    assert knowledge(busy.engine) == knowledge(engine)


def test_reading_nova_changes_leaves_what_a_full_read_leaves(loop):
    """After creates, a resize, a migration and deletes, the runs that read Nova's
    ``changes-since`` (and the usages of the nodes it names) hold what a full read of
    Nova and Placement then holds."""
    loop.sync()  # a run of both sources: the next ones read changes
    kept = loop.boot(loop.flavor("h100x1", **H100X1), name="kept")[0]
    gone = loop.boot(loop.flavor("h100x2", **H100X2), name="gone")[0]
    loop.move("resize", server=kept["id"], flavor=loop.flavor("h100x2", **H100X2))
    loop.nova.call("delete", servers=[gone["id"]])
    loop.sync()
    with loop.engine.connect() as connection:
        details = dict(connection.execute(text(
            "SELECT source, detail FROM sync_status")).all())
    assert all(d["changes"]["since"] for d in details.values()), details  # changes read
    incremental = knowledge(loop.engine) | {"usage": usage(loop.engine)}
    full = config.load(environ={}, overrides={
        "database.connection": loop.conf.database_url, "openstack.cloud": CLOUD,
        "sync.full_sync_interval": 0.0})
    for source in build_sources(full, ("nova", "placement")):
        assert run_source(loop.engine, source).ok
    assert knowledge(loop.engine) | {"usage": usage(loop.engine)} == incremental


def usage(engine) -> set:
    with engine.connect() as connection:
        return set(connection.execute(text(
            "SELECT provider_uuid, resource_class, used FROM provider_inventories")).all())
