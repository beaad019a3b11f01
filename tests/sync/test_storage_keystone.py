"""Cinder and Manila pools into storage_pools, Keystone projects and domains."""

from __future__ import annotations

import copy
import math

from sqlalchemy import select

from cortex.db import models
from cortex.knowledge.loader import load_view
from cortex.sync.runner import run_source
from cortex.sync.sources import build_sources
from tests.fake_openstack import sample
from tests.sync.conftest import sync_conf

EU_DE_1B = "627bf322-5fac-4cb6-a34a-cb115ee347dd"


def pools(engine) -> dict:
    with engine.connect() as c:
        return {(r.service, r.name): r for r in c.execute(select(models.StoragePool.__table__))}


def sync(engine, fake, database_url, *names):
    results = [run_source(engine, s) for s in build_sources(sync_conf(database_url, fake), names)]
    assert all(r.ok for r in results), [r.error for r in results]
    return results


def test_cinder_and_manila_pools_with_their_zones(openstack, sync_engine, sync_database_url):
    cloud = openstack.cloud
    cloud.cinder_pools = copy.deepcopy(sample("cinder/pools-list-detailed-response.json")["pools"])
    cloud.cinder_pools[0]["name"] = "cinder-volume-1@netapp-a#pool1"
    cloud.cinder_pools[1]["name"] = "cinder-volume-2@lvm#pool2"
    cloud.cinder_pools[1]["capabilities"].update(
        total_capacity_gb="infinite", free_capacity_gb="unknown", thin_provisioning_support=True,
        max_over_subscription_ratio="20.0")
    cloud.cinder_services = [
        {"binary": "cinder-volume", "host": "cinder-volume-1@netapp-a", "zone": "eu-de-1a",
         "status": "enabled", "state": "up"},
        {"binary": "cinder-volume", "host": "cinder-volume-2@lvm", "zone": "eu-de-1b",
         "status": "enabled", "state": "up"},
        {"binary": "cinder-scheduler", "host": "cinder-volume-2@lvm", "zone": "wrong"}]
    cloud.manila_pools = sample("manila/pools-list-detailed-response.json")["pools"]
    cloud.manila_services = [{"binary": "manila-share", "host": f"opencloud@{b}",
                              "zone": "eu-de-1a" if b != "delta" else "eu-de-1b"}
                             for b in ("alpha", "beta", "gamma", "delta")]
    sync(sync_engine, openstack, sync_database_url, "cinder", "manila")

    found = pools(sync_engine)
    assert set(found) == {("cinder", "cinder-volume-1@netapp-a#pool1"),
                          ("cinder", "cinder-volume-2@lvm#pool2")} | {
        ("manila", f"opencloud@{b}#{b.upper()}_pool") for b in ("alpha", "beta", "gamma",
                                                                "delta")}
    netapp = found[("cinder", "cinder-volume-1@netapp-a#pool1")]
    assert (netapp.availability_zone, netapp.total_capacity_gb, netapp.free_capacity_gb,
            netapp.thin_provisioning_support) == ("eu-de-1a", 1024.0, 100.0, False)
    assert netapp.availability_zone_id is None          # Cinder's zones have names only
    assert netapp.capabilities["storage_protocol"] == "iSCSI"
    lvm = found[("cinder", "cinder-volume-2@lvm#pool2")]
    assert lvm.availability_zone == "eu-de-1b" and math.isinf(lvm.total_capacity_gb)
    assert math.isinf(lvm.free_capacity_gb) and lvm.max_over_subscription_ratio == 20.0
    delta = found[("manila", "opencloud@delta#DELTA_pool")]
    assert delta.availability_zone == "eu-de-1b" and delta.total_capacity_gb == 1230.0
    assert delta.capabilities["replication_domain"] == "replica_domain_store1"

    # a pool that went away goes; manila's rows are not cinder's business
    cloud.cinder_pools.pop(0)
    sync(sync_engine, openstack, sync_database_url, "cinder")
    assert {k for k in pools(sync_engine) if k[0] == "cinder"} == {
        ("cinder", "cinder-volume-2@lvm#pool2")}
    assert len([k for k in pools(sync_engine) if k[0] == "manila"]) == 4


def test_manila_pools_know_their_zone_ids(openstack, sync_engine, sync_database_url):
    """Manila's GET /availability-zones maps the share services' zone names to ids."""
    cloud = openstack.cloud
    cloud.manila_pools = sample("manila/pools-list-detailed-response.json")["pools"]
    (listed,) = sample("manila/availability-zones-list-response.json")["availability_zones"]
    cloud.manila_zones = [listed, {**listed, "name": "eu-de-1b", "id": EU_DE_1B}]
    zones = {"alpha": listed["name"], "beta": "eu-de-1b", "gamma": "eu-de-1c"}  # 1c: unlisted
    cloud.manila_services = [{"binary": "manila-share", "host": f"opencloud@{b}", "zone": z}
                             for b, z in zones.items()]
    sync(sync_engine, openstack, sync_database_url, "manila")

    found = {name.split("@")[1].split("#")[0]: (row.availability_zone,
                                                 row.availability_zone_id)
             for (_, name), row in pools(sync_engine).items()}
    assert found == {"alpha": ("nova", listed["id"]), "beta": ("eu-de-1b", EU_DE_1B),
                     "gamma": ("eu-de-1c", None), "delta": (None, None)}
    view = load_view(sync_engine)
    assert view.pools["manila"]["opencloud@beta#BETA_pool"].availability_zone_id == EU_DE_1B
    assert view.pools["manila"]["opencloud@gamma#GAMMA_pool"].availability_zone_id is None
    # asked at 2.7: Manila has the services and availability-zones URLs from 2.7 only
    assert {v for _, p, v in openstack.requests
            if p in ("/share/v2/services", "/share/v2/availability-zones")} == {
        "shared-file-system 2.7"}


def test_keystone_projects_and_domains(openstack, sync_engine, sync_database_url):
    cloud = openstack.cloud
    cloud.domains = [{"id": "default", "name": "Default", "enabled": True, "description": ""},
                     {"id": "d2", "name": "ccadmin", "enabled": False}]
    cloud.projects = [
        {"id": "p1", "name": "gpu-team", "domain_id": "default", "parent_id": "default",
         "enabled": True, "is_domain": False, "description": "GPUs"},
        {"id": "p2", "name": "hana", "domain_id": "d2", "parent_id": "p1", "enabled": False,
         "is_domain": False},
        {"id": "d2", "name": "ccadmin", "domain_id": None, "is_domain": True}]
    sync(sync_engine, openstack, sync_database_url, "keystone")
    with sync_engine.connect() as c:
        projects = {r.id: r for r in c.execute(select(models.Project.__table__))}
        domains = {r.id: r for r in c.execute(select(models.Domain.__table__))}
    assert set(projects) == {"p1", "p2"} and set(domains) == {"default", "d2"}
    assert (projects["p2"].parent_id, projects["p2"].enabled) == ("p1", False)
    assert domains["d2"].enabled is False and projects["p1"].description == "GPUs"
