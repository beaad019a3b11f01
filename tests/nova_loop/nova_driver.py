"""Upstream Nova 34's control plane scheduling through Cortex: the Nova side of the loop.

Runs only in the Nova functional virtualenv (``tests/differential/nova_venv.py``,
:func:`nova_functional_venv`), never in Cortex's interpreter:
``python nova_driver.py CONFIG.json``. It starts what Nova's own functional tests start
(``nova/tests/functional/libvirt/base.py`` ServersTestBase): the API (behind
wsgi-intercept), conductor, scheduler and one nova-compute per host of
``fleet.py`` with the libvirt driver on Nova's fake libvirt (NUMA cells, dedicated and
shared CPUs, 1 GiB pages, PCI GPUs by NUMA node reported to Placement), backed by the
real Placement (``openstack-placement`` 16 in the same process, PlacementFixture),
RPC casts made calls (``CAST_AS_CALL``) so every API call returns once Nova is done.

Into that Nova it installs the external scheduler hook of the callers' contract
(``shared/docs/caller-contract.md``), :class:`CortexHook`: after Nova's filters and
weighers, :func:`sorted_hosts` POSTs the spec, the context, the ``rebuild`` /
``resize`` / ``live`` / ``vmware`` flags, the hosts and Nova's weights to Cortex, keeps
the answer's order (``[]``: no valid host) and keeps Nova's own order on any failure;
``[filter_scheduler] host_subset_size = 1`` takes the first host, the rest stay
alternates. Upstream Nova sets the ``_nova_check_type`` hint for rebuilds only; SAP's
Nova also sets ``resize`` (resize and cold migration) and ``live_migrate`` (both with
``source_host``/``source_node``) where a move starts, and the contract names
``evacuate``: :func:`select_destinations` adds them, per call, from the instance's task
state (``resize_prep``, ``migrating``, ``rebuilding`` without a rebuild hint).

One HTTP server on a loopback port serves Nova's API at ``/compute`` (a token-less
request is the admin: the identity headers the harness's keystone stub reads are added),
Placement at ``/placement`` (as the admin: every request gets noauth2's token ``admin``)
and the test's commands at ``/control/<command>`` (JSON; see :meth:`Loop.command`),
which drive Nova through the harness's API client and helpers. The driver prints
``READY <json>`` with the URLs once everything runs, and stops on ``/control/stop`` or
when stdin closes.
"""

from __future__ import annotations

import importlib.util  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import uuid as uuidlib  # noqa: E402
from pathlib import Path  # noqa: E402
from urllib.parse import parse_qs, urlsplit  # noqa: E402

import eventlet  # noqa: E402
import eventlet.event  # noqa: E402
import eventlet.semaphore  # noqa: E402
import eventlet.wsgi  # noqa: E402
import fixtures  # noqa: E402
import jsonschema  # noqa: E402
import nova.tests  # noqa: F401 - Nova's eventlet monkey patching, before anything opens sockets
import oslo_messaging as messaging  # noqa: E402
import requests  # noqa: E402
from nova import context as nova_context  # noqa: E402
from nova import exception, objects  # noqa: E402
from nova.compute import resource_tracker, task_states  # noqa: E402
from nova.scheduler import manager as scheduler_manager  # noqa: E402
from nova.scheduler import utils as scheduler_utils  # noqa: E402
from nova.tests.fixtures import libvirt as fakelibvirt  # noqa: E402
from nova.tests.functional.api import client as api_client  # noqa: E402
from nova.tests.functional.libvirt import base  # noqa: E402
from oslo_config import cfg  # noqa: E402

CONF = cfg.CONF
LOG = logging.getLogger("nova_loop")
HERE = Path(__file__).resolve().parent
ADMIN_PROJECT = "6f70656e737461636b20342065766572"  # the harness's project (nova_fixtures)


def _load_fleet():
    """``fleet.py`` by path: this interpreter has no ``tests`` package of Cortex's."""
    spec = importlib.util.spec_from_file_location("nova_loop_fleet", HERE / "fleet.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fleet = _load_fleet()

#: The caller's check of an answer (the contract: any other key discards it).
RESPONSE_SCHEMA = {"type": "object", "properties": {"hosts": {
    "type": "array", "items": {"type": "string"}}},
    "required": ["hosts"], "additionalProperties": False}


# ----------------------------------------------------------------------------- the hook

class CortexHook:
    """The external scheduler hook of the callers' contract, calling Cortex.

    ``calls`` records every call: what was offered and weighed, Cortex's answer (or why
    Nova kept its own order) and the order Nova went on with. ``race`` (set by the test)
    makes the next answered call find its first host's memory taken in Placement by
    another consumer just after Cortex answered, as a concurrent scheduler would.
    """

    def __init__(self, url: str, timeout: float, case: Loop) -> None:
        self.url = url
        self.timeout = timeout
        self.case = case
        self.calls: list[dict] = []
        self.race = False
        self.race_consumers: list[str] = []

    def body(self, context, spec_obj, hosts, weights) -> dict:
        """The request body: spec primitive without cell credentials, context without token."""
        spec = spec_obj.obj_to_primitive()
        data = spec.get("nova_object.data") or {}
        cell = (((data.get("requested_destination") or {}).get("nova_object.data") or {})
                .get("cell") or {}).get("nova_object.data")
        if cell:
            cell.pop("database_connection", None)
            cell.pop("transport_url", None)
        ctx = context.to_dict() if context is not None else {}
        ctx.pop("auth_token", None)
        check = spec_obj.get_scheduler_hint("_nova_check_type") \
            if "scheduler_hints" in spec_obj else None
        return {
            "spec": spec, "context": ctx,
            "rebuild": check == "rebuild", "resize": check == "resize",
            "live": check == "live_migrate", "vmware": not non_vmware(spec_obj),
            "hosts": [{"host": h.host, "hypervisor_hostname": h.nodename} for h in hosts],
            "weights": weights,
        }

    def __call__(self, context, spec_obj, hosts, weights):
        """The hosts in Cortex's order (only those it names); Nova's order on a failure."""
        body = self.body(context, spec_obj, hosts, weights)
        call = {"instance_uuid": spec_obj.instance_uuid if "instance_uuid" in spec_obj
                else None, "check_type": body["spec"]["nova_object.data"].get(
                    "scheduler_hints", {}).get("_nova_check_type"),
                "flags": {k: body[k] for k in ("rebuild", "resize", "live", "vmware")},
                "offered": [h.host for h in hosts], "weights": weights,
                "answer": None, "fallback": None, "at": time.time()}
        self.calls.append(call)
        try:
            response = requests.post(self.url, json=body, timeout=self.timeout)
            call["status"] = response.status_code
            call["decision_id"] = response.headers.get("x-cortex-decision-id")
            response.raise_for_status()
            answer = response.json()
        except (requests.RequestException, ValueError) as exc:
            call["fallback"] = f"{type(exc).__name__}: {exc}"
            LOG.error("Failed to call external scheduler API: %s", exc)
            call["kept"] = call["offered"]
            return hosts
        try:
            jsonschema.validate(answer, RESPONSE_SCHEMA)
        except jsonschema.ValidationError as exc:
            call["fallback"] = f"invalid answer: {exc.message}"
            call["kept"] = call["offered"]
            return hosts
        call["answer"] = names = answer["hosts"]
        if not names:
            LOG.warning("External scheduler filtered out all hosts.")
        by_name = {h.host: h for h in hosts}
        chosen = [by_name[name] for name in names]  # an unknown name fails the request
        if self.race and chosen:
            self.race = False
            call["raced"] = chosen[0].host
            self.take_memory(chosen[0])
        call["kept"] = [h.host for h in chosen]
        return chosen

    def take_memory(self, host_state) -> None:
        """Allocate all free MEMORY_MB of the host's provider to a consumer of our own."""
        placement = self.case.placement
        uuid = host_state.uuid
        inventory = placement.get(f"/resource_providers/{uuid}/inventories").body[
            "inventories"]["MEMORY_MB"]
        used = placement.get(f"/resource_providers/{uuid}/usages").body["usages"].get(
            "MEMORY_MB", 0)
        free = int((inventory["total"] - inventory["reserved"])
                   * inventory["allocation_ratio"]) - used
        consumer = str(uuidlib.uuid4())
        answer = placement.put(f"/allocations/{consumer}", {
            "allocations": {uuid: {"resources": {"MEMORY_MB": free}}},
            "project_id": ADMIN_PROJECT, "user_id": "race", "consumer_generation": None},
            version="1.28")
        assert answer.status == 204, answer.body
        self.race_consumers.append(consumer)

    def free_races(self) -> None:
        """Delete the allocations :meth:`take_memory` made."""
        while self.race_consumers:
            self.case.placement.delete(f"/allocations/{self.race_consumers.pop()}")


HOOK: CortexHook | None = None


def non_vmware(spec_obj) -> bool:
    """Whether the spec names a hypervisor other than VMware (then ``vmware`` is false).

    As SAP's Nova decides it: a baremetal flavor (Ironic's convention: ``resources:VCPU``
    zeroed and a custom resource class asked), a ``capabilities:hypervisor_type`` extra
    spec that does not match VMware, or an image ``img_hv_type`` of another type.
    """
    from nova.objects import fields
    from nova.scheduler.filters import extra_specs_ops

    if "flavor" in spec_obj:
        specs = spec_obj.flavor.extra_specs
        if specs.get("resources:VCPU") == "0" and any(
                k.startswith("resources:CUSTOM_") for k in specs):
            return True
        wanted = spec_obj.flavor.extra_specs.get("capabilities:hypervisor_type")
        if wanted and not extra_specs_ops.match("VMware vCenter Server", wanted):
            return True
    if "image" in spec_obj and spec_obj.image is not None:
        hv_type = fields.HVType.canonicalize(spec_obj.image.properties.get("img_hv_type"))
        if hv_type and hv_type != fields.HVType.VMWARE:
            return True
    return False


def sorted_hosts(self, spec_obj, host_states, index):
    """``SchedulerManager._get_sorted_hosts`` with the hook between weighing and choosing.

    Nova's filters and weighers as upstream, then the hook with each host's final weight
    (``{host: weight}``), then the first ``host_subset_size`` of the hook's order choose
    the host and the rest stay alternates, in that order.
    """
    filtered = self.host_manager.get_filtered_hosts(host_states, spec_obj, index)
    if not filtered:
        return []
    weighed = self.host_manager.get_weighed_hosts(filtered, spec_obj)
    weights = {w.obj.host: w.weight for w in weighed}
    hosts = [w.obj for w in weighed]
    hosts = HOOK(getattr(SCHEDULING, "context", None), spec_obj, hosts, weights)
    if not hosts:
        return []
    subset = hosts[:CONF.filter_scheduler.host_subset_size]
    chosen = random.choice(subset)
    hosts.remove(chosen)
    return [chosen] + hosts


_upstream_select_destinations = scheduler_manager.SchedulerManager.select_destinations
#: The scheduling call's request context, per green thread (what the hook sends).
SCHEDULING = threading.local()


@messaging.expected_exceptions(exception.NoValidHost)
def select_destinations(self, context, request_spec=None, filter_properties=None,
                        spec_obj=scheduler_manager.SchedulerManager._sentinel,
                        instance_uuids=None, return_objects=False, return_alternates=False):
    """Upstream's, with SAP's ``_nova_check_type`` (and source) hints for moves added.

    Keeps the call's request context for the hook (oslo.context's current context is
    not it by the time the hook runs: the scheduler makes other contexts meanwhile).
    """
    if isinstance(spec_obj, objects.RequestSpec):
        add_move_hints(context, spec_obj)
    SCHEDULING.context = context
    return _upstream_select_destinations(
        self, context, request_spec=request_spec, filter_properties=filter_properties,
        spec_obj=spec_obj, instance_uuids=instance_uuids, return_objects=return_objects,
        return_alternates=return_alternates)


#: task state of the instance -> the intent SAP's Nova names in ``_nova_check_type``.
MOVE_INTENTS = {task_states.RESIZE_PREP: "resize", task_states.MIGRATING: "live_migrate",
                task_states.REBUILDING: "evacuate"}


def add_move_hints(context, spec_obj) -> None:
    """Set ``_nova_check_type`` (and ``source_host``/``source_node``) for a move."""
    if scheduler_utils.request_is_rebuild(spec_obj) or "instance_uuid" not in spec_obj:
        return
    try:
        mapping = objects.InstanceMapping.get_by_instance_uuid(context, spec_obj.instance_uuid)
        with nova_context.target_cell(context, mapping.cell_mapping) as cctxt:
            instance = objects.Instance.get_by_uuid(cctxt, spec_obj.instance_uuid)
    except exception.NotFound:
        return
    intent = MOVE_INTENTS.get(instance.task_state) if instance.host else None
    if intent is None:
        return
    hints = dict(spec_obj.scheduler_hints or {}) if "scheduler_hints" in spec_obj else {}
    hints["_nova_check_type"] = [intent]
    if intent in ("resize", "live_migrate"):
        hints.update(source_host=[instance.host], source_node=[instance.node])
    spec_obj.scheduler_hints = hints


def _create_mdev(self, dev_name, mdev_type, uuid=None):
    """A mediated device on this driver's fake host (fake libvirt creates none itself)."""
    from nova.virt.libvirt import utils as libvirt_utils

    uuid = uuid or str(uuidlib.uuid4())
    self._host.get_connection().mdev_info.devices[libvirt_utils.mdev_uuid2name(uuid)] = \
        fakelibvirt.FakeMdevDevice(dev_name=libvirt_utils.mdev_uuid2name(uuid),
                                   type_id=mdev_type, parent=dev_name)
    return uuid


_upstream_instance_claim = resource_tracker.ResourceTracker.instance_claim
#: host (``*``: any) -> how many more instance claims nova-compute refuses there.
FAILING_CLAIMS: dict[str, int] = {}


def instance_claim(self, context, instance, nodename, allocations, limits=None):
    """Upstream's, refused where the test asked (as a claim losing to a concurrent one)."""
    which = self.host if FAILING_CLAIMS.get(self.host) else "*"
    if FAILING_CLAIMS.get(which):
        FAILING_CLAIMS[which] -= 1
        raise exception.ComputeResourcesUnavailable(
            reason="refused by the Nova loop (a concurrent claim took the resources)")
    return _upstream_instance_claim(self, context, instance, nodename, allocations, limits)


# ----------------------------------------------------------------------------- Nova

class Loop(base.ServersTestBase):
    """Nova's functional harness, set up once and driven by commands."""

    ADDITIONAL_FILTERS = ["NUMATopologyFilter", "PciPassthroughFilter"]
    ADMIN_API = True
    microversion = "latest"

    def __init__(self, config: dict) -> None:
        super().__init__("test_serve")
        self.config = config
        self.servers_port = None

    def test_serve(self):  # pragma: no cover - a testtools method name, never run
        """Unused: the driver calls setUp and the commands itself."""

    def setUp(self):
        self.flags(api_paste_config=str(Path(sys.prefix) / "etc/nova/api-paste.ini"),
                   group="wsgi")
        self.flags(device_spec=[json.dumps({"vendor_id": v, "product_id": p})
                                for v, p, _, _ in fleet.MODELS.values()],
                   alias=[json.dumps(a) for a in fleet.ALIASES],
                   report_in_placement=True, group="pci")
        self.flags(pci_in_placement=True, host_subset_size=1, group="filter_scheduler")
        self.flags(cpu_dedicated_set=fleet.CPU_DEDICATED_SET,
                   cpu_shared_set=fleet.CPU_SHARED_SET, group="compute")
        self.flags(enabled_mdev_types=[fleet.VGPU_TYPE], group="devices")
        self.flags(instances=-1, cores=-1, ram=-1, group="quota")  # the fleet is the limit
        super().setUp()
        self.useFixture(fixtures.MockPatch(
            "nova.virt.libvirt.driver.LibvirtDriver.migrate_disk_and_power_off",
            return_value="{}"))
        self.useFixture(fixtures.MonkeyPatch(
            "nova.tests.fixtures.libvirt.Domain.migrateToURI3", self._migrate_stub))
        self.useFixture(fixtures.MonkeyPatch(
            "nova.virt.libvirt.driver.LibvirtDriver._create_mdev", _create_mdev))
        for name, gpus in fleet.HOSTS.items():
            self.start_compute(hostname=name, host_info=self._host_info(),
                               pci_info=self._pci_info(gpus, fleet.VGPUS.get(name, ())))
        self._aggregates()

    def _get_connection(self, host_info=None, pci_info=None, mdev_info=None,
                        vdpa_info=None, libvirt_version=None, qemu_version=None,
                        hostname=None):
        """The base's fake connection without its 16-CPU cap (hosts here have 16)."""
        return fakelibvirt.Connection(
            "qemu:///system", version=libvirt_version or fakelibvirt.FAKE_LIBVIRT_VERSION,
            hv_version=qemu_version or fakelibvirt.FAKE_QEMU_VERSION, host_info=host_info,
            pci_info=pci_info, mdev_info=mdev_info, vdpa_info=vdpa_info, hostname=hostname)

    @staticmethod
    def _host_info():
        """Two sockets with one NUMA cell each, 4 cores x 2 threads, 1 GiB pages."""
        info = fakelibvirt.HostInfo(cpu_nodes=1, cpu_sockets=fleet.CELLS,
                                    cpu_cores=fleet.CORES_PER_CELL,
                                    cpu_threads=fleet.THREADS_PER_CORE,
                                    kB_mem=fleet.CELLS * fleet.CELL_MEMORY_MB * 1024)
        huge_kb = fleet.CELL_1G_PAGES * 1048576
        for cell in info.numa_topology.cells:
            cell.mempages = fakelibvirt.create_mempages([
                (4, (fleet.CELL_MEMORY_MB * 1024 - huge_kb) // 4), (2048, 0),
                (1048576, fleet.CELL_1G_PAGES)])
        return info

    @staticmethod
    def _pci_info(gpus, vgpus=()):
        """The host's GPUs as fake libvirt PCI devices on their NUMA nodes.

        ``gpus`` for passthrough, ``vgpus`` (address, node) mdev-capable.
        """
        info = fakelibvirt.HostPCIDevicesInfo(num_pci=0, num_pfs=0, num_vfs=0)
        devices = [("PCI", address, node, fleet.MODELS[model]) for model, address, node in gpus]
        devices += [("MDEV_TYPES", address, node, None) for address, node in vgpus]
        for group, (kind, address, node, model) in enumerate(devices):
            _, bus, slot_function = address.split(":")
            slot, function = slot_function.split(".")
            ids = {} if model is None else {
                "vend_id": model[0], "vend_name": "NVIDIA Corporation", "prod_id": model[1],
                "prod_name": model[2], "driver_name": "vfio-pci"}
            info.add_device(dev_type=kind, bus=int(bus, 16), slot=int(slot, 16),
                            function=int(function), iommu_group=40 + group, numa_node=node,
                            **ids)
        return info

    def _aggregates(self):
        """``az-1`` with every host; one aggregate per GPU model with its hosts."""
        zone = self.admin_api.post_aggregate(
            {"aggregate": {"name": fleet.ZONE, "availability_zone": fleet.ZONE}})
        for host in fleet.HOSTS:
            self.admin_api.add_host_to_aggregate(zone["id"], host)
        for model in fleet.MODELS:
            hosts = [h for h, gpus in fleet.HOSTS.items() if any(g[0] == model for g in gpus)]
            aggregate = self.admin_api.post_aggregate({"aggregate": {"name": f"gpu-{model}"}})
            self.admin_api.post_aggregate_action(
                aggregate["id"], {"set_metadata": {"metadata": {"gpu_model": model}}})
            for host in hosts:
                self.admin_api.add_host_to_aggregate(aggregate["id"], host)

    def _migrate_stub(self, domain, destination, params, flags):
        """A live migration on the fake hypervisors: the guest appears on the destination."""
        target = urlsplit(destination).hostname
        self.computes[target].driver._host.get_connection().createXML(
            params["destination_xml"], "fake-createXML-doesnt-care-about-flags")
        domain.complete_job()

    # ------------------------------------------------------------------ commands

    def command(self, name: str, args: dict):
        """Run one control command; its JSON-able result."""
        handler = getattr(self, f"cmd_{name}", None)
        if handler is None:
            raise KeyError(f"no command {name}")
        return handler(**args)

    def cmd_state(self):
        """Hosts with their root provider uuids."""
        return {"hosts": list(fleet.HOSTS), "providers": dict(self.compute_rp_uuids)}

    def cmd_flavor(self, name, vcpus, ram, disk=10, extra_specs=None):
        """Create a flavor; its id."""
        return {"id": self._create_flavor(name=name, vcpu=vcpus, memory_mb=ram, disk=disk,
                                          ephemeral=0, extra_spec=extra_specs)}

    def cmd_group(self, name, policy, rules=None):
        """Create a server group (microversion 2.64 form); the group."""
        body = {"name": name, "policy": policy}
        if rules:
            body["rules"] = rules
        return self.api.post_server_groups(body)

    def cmd_boot(self, flavor, name="vm", min_count=1, max_count=None, group=None,
                 expect="ACTIVE", image=None, host=None):
        """Create servers through the API and wait for ``expect``; the servers.

        ``host``: the requested destination host (microversion 2.74), which the scheduler
        (and Cortex) still checks.
        """
        body = self._build_server(name=name, flavor_id=flavor, networks="none",
                                  image_uuid=image, host=host)
        body["min_count"] = min_count
        body["max_count"] = max_count or min_count
        body["return_reservation_id"] = True
        request = {"server": body}
        if group:
            request["os:scheduler_hints"] = {"group": group}
        reservation = self.api.api_post("/servers", request).body["reservation_id"]
        servers = self.api.get_servers(search_opts={"reservation_id": reservation})
        return {"servers": [self._wait_for_state_change(s, expect, max_retries=40)
                            for s in servers]}

    def cmd_servers(self):
        """The ids of every server Nova lists (all projects)."""
        return {"servers": [s["id"] for s in self.api.get_servers(
            search_opts={"all_tenants": 1})]}

    def cmd_show(self, server):
        """One server as the API shows it."""
        return self.api.get_server(server)

    def cmd_delete(self, servers):
        """Delete servers and wait until they are gone.

        A delete answered 500 is asked again (at most twice): with every RPC cast made a
        call in this one process, nova-compute's termination runs inside the API's
        database reader context, and oslo.db now and then refuses the resource
        tracker's write there ("Can't upgrade a READER transaction to a WRITER"), a
        fault of this harness, not of a real deployment, where the cast runs in the
        compute service.
        """
        for server in servers:
            for attempt in range(3):
                try:
                    self.api.delete_server(server)
                except api_client.OpenStackApiNotFoundException:
                    break
                except api_client.OpenStackApiException as exc:
                    if attempt == 2 or getattr(exc.response, "status_code", None) != 500:
                        raise
                    LOG.warning("delete of %s answered 500, asked again: %s", server, exc)
                    time.sleep(0.5)
                    continue
                break
        for server in servers:
            self._wait_until_deleted({"id": server, "status": "DELETED"})
        return {}

    def cmd_resize(self, server, flavor, confirm=True):
        """Resize (scheduler call ``resize``); confirmed unless asked not to."""
        found = self._resize_server(self.api.get_server(server), flavor)
        return self._confirm_resize(found) if confirm else found

    def cmd_migrate(self, server, host=None, confirm=True):
        """Cold-migrate (to ``host`` when given, microversion 2.56), then confirm."""
        found = self._migrate_server(self.api.get_server(server), host=host)
        return self._confirm_resize(found) if confirm else found

    def cmd_confirm(self, server):
        """Confirm a resize or cold migration waiting in VERIFY_RESIZE."""
        return self._confirm_resize(self.api.get_server(server))

    def cmd_live_migrate(self, server, host=None):
        """Live-migrate, the destination chosen by the scheduler unless ``host``."""
        return self._live_migrate(self.api.get_server(server), host=host)

    def cmd_evacuate(self, server):
        """Stop the server's compute, force it down, evacuate, bring the compute back.

        From microversion 2.95 Nova keeps an evacuated server stopped (SHUTOFF).
        """
        found = self.api.get_server(server)
        source = found["OS-EXT-SRV-ATTR:host"]
        service = self.api.get_services(host=source, binary="nova-compute")[0]
        self.computes[source].stop()
        self.api.put_service_force_down(service["id"], True)
        try:
            moved = self._evacuate_server(found, expected_state="SHUTOFF")  # 2.95 and on
        finally:
            self.restart_compute_service(source)
            self.api.put_service_force_down(service["id"], False)
        return moved

    def cmd_rebuild(self, server, image):
        """Rebuild with another image (the scheduler is asked about the same host)."""
        return self._rebuild_server(self.api.get_server(server), image)

    def cmd_images(self):
        """The ids of the images the fake Glance holds."""
        from nova import utils

        with utils.temporary_mutation(self.api, microversion="2.35"):  # gone after 2.35
            return {"images": [i["id"] for i in self.api.get_images()]}

    def cmd_usage(self, host):
        """What the agent would read on ``host``: per-cell CPU, memory and page usage,
        the PCI addresses guests hold, the guests (after the resource tracker's update)."""
        ctx = nova_context.get_admin_context()
        with nova_context.target_cell(ctx, self.host_mappings[host].cell_mapping) as cctxt:
            self.computes[host].manager.update_available_resource(cctxt)
            node = objects.ComputeNode.get_by_nodename(cctxt, host)
            topology = objects.NUMATopology.obj_from_db_obj(node.numa_topology)
            devices = objects.PciDeviceList.get_by_compute_node(cctxt, node.id)
            guests = objects.InstanceList.get_by_host(cctxt, host)
        cells = {str(cell.id): {
            "pinned_cpus": sorted(cell.pinned_cpus), "cpu_usage": cell.cpu_usage,
            "memory_usage": cell.memory_usage,
            "mempages": [{"size_kb": p.size_kb, "total": p.total, "used": p.used,
                          "reserved": p.reserved} for p in cell.mempages]}
            for cell in topology.cells}
        return {"cells": cells, "guests": len(guests),
                "pci_in_use": sorted(d.address for d in devices
                                     if d.status in ("claimed", "allocated"))}

    def cmd_hook_calls(self, since=0):
        """The hook's calls from index ``since``."""
        return {"calls": HOOK.calls[since:], "count": len(HOOK.calls)}

    def cmd_fail_claims(self, host, count=1):
        """nova-compute on ``host`` (``*``: any) refuses its next ``count`` instance claims."""
        FAILING_CLAIMS[host] = count
        return {}

    def cmd_race(self):
        """The next answered call finds its first host's memory taken in Placement."""
        HOOK.race = True
        return {}

    def cmd_free_races(self):
        """Remove the allocations the races made."""
        HOOK.free_races()
        return {}

    def cmd_services(self):
        """Every nova-compute service as the API lists it (state, status, forced down)."""
        return {"services": [{k: s.get(k) for k in ("host", "state", "status",
                                                      "forced_down", "updated_at")}
                             for s in self.api.get_services(binary="nova-compute")]}

    def cmd_log(self, lines=200):
        """The last lines of the driver's log."""
        return {"log": LOG_FILE.read_text().splitlines()[-lines:] if LOG_FILE else []}


LOG_FILE: Path | None = None


# ----------------------------------------------------------------------------- serving

def compute_identity(app):
    """Nova's API as a token-less admin: the headers the harness's keystone stub reads."""
    def wrapped(environ, start_response):
        environ.setdefault("HTTP_X_AUTH_USER", "admin")
        environ.setdefault("HTTP_X_AUTH_PROJECT_ID", ADMIN_PROJECT)
        environ.setdefault("HTTP_X_ROLES", "admin,member,reader")
        return app(environ, start_response)
    return wrapped


def placement_token(app):
    """Placement as the admin: its noauth2 admin token on every request.

    openstacksdk without authentication (``auth_type: none``) sends the token
    ``notused``, which noauth2 takes for a user without roles.
    """
    def wrapped(environ, start_response):
        environ["HTTP_X_AUTH_TOKEN"] = "admin"
        return app(environ, start_response)
    return wrapped


def make_dispatcher(loop: Loop, stop: eventlet.event.Event):
    """One WSGI app: ``/compute``, ``/placement`` and ``/control/<command>``."""
    from placement import deploy

    compute = compute_identity(loop.api_fixture.app())
    placement = placement_token(deploy.loadapp(loop.placement_fixture.conf_fixture.conf))
    lock = eventlet.semaphore.Semaphore()

    def control(environ, start_response):
        name = environ["PATH_INFO"].strip("/")
        length = int(environ.get("CONTENT_LENGTH") or 0)
        args = json.loads(environ["wsgi.input"].read(length) or b"{}") if length else {}
        args.update({k: v[0] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()})
        if name == "stop":
            stop.send(True)
            start_response("200 OK", [("Content-Type", "application/json")])
            return [b"{}"]
        with lock:
            try:
                result, status = loop.command(name, args), "200 OK"
            except Exception as exc:  # noqa: BLE001 - any failure goes back to the test
                LOG.exception("command %s failed", name)
                result = {"error": f"{type(exc).__name__}: {exc}",
                          "traceback": traceback.format_exc()}
                status = "500 Internal Server Error"
        start_response(status, [("Content-Type", "application/json")])
        return [json.dumps(result, default=str).encode()]

    mounts = {"/compute": compute, "/placement": placement, "/control": control}

    def dispatch(environ, start_response):
        path = environ.get("PATH_INFO", "")
        for prefix, app in mounts.items():
            if path == prefix or path.startswith(prefix + "/"):
                environ["SCRIPT_NAME"] = environ.get("SCRIPT_NAME", "") + prefix
                environ["PATH_INFO"] = path[len(prefix):]
                return app(environ, start_response)
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found"]

    return dispatch


def main(config_path: str) -> int:
    """Start Nova and serve until told to stop; 0."""
    global HOOK, LOG_FILE
    config = json.loads(Path(config_path).read_text())
    started = time.monotonic()
    scheduler_manager.SchedulerManager._get_sorted_hosts = sorted_hosts
    scheduler_manager.SchedulerManager.select_destinations = select_destinations
    resource_tracker.ResourceTracker.instance_claim = instance_claim
    loop = Loop(config)
    loop.setUp()
    HOOK = CortexHook(config["cortex_url"], config.get("timeout", 10), loop)
    LOG_FILE = Path(config["log"])
    handler = logging.FileHandler(LOG_FILE)
    handler.setLevel(logging.INFO)
    handler.setFormatter(logging.Formatter(
        "%(asctime)s %(levelname)s %(name)s %(message)s"))
    logging.getLogger().addHandler(handler)
    stop = eventlet.event.Event()
    sock = eventlet.listen(("127.0.0.1", config.get("port", 0)))
    port = sock.getsockname()[1]
    server = eventlet.spawn(eventlet.wsgi.server, sock, make_dispatcher(loop, stop),
                            log_output=False, log=logging.getLogger("nova_loop.wsgi"))
    watcher = eventlet.spawn(_watch_stdin, stop)
    base_url = f"http://127.0.0.1:{port}"
    print("READY " + json.dumps({
        "compute": f"{base_url}/compute/v2.1", "placement": f"{base_url}/placement",
        "control": f"{base_url}/control", "started_in": round(time.monotonic() - started, 2),
    }), flush=True)
    stop.wait()
    server.kill()
    watcher.kill()
    HOOK.free_races()
    loop.doCleanups()
    return 0


def _watch_stdin(stop) -> None:
    """Stop when the test's end of stdin closes (the test process died)."""
    from eventlet.green import select

    while True:
        readable, _, _ = select.select([sys.stdin], [], [], 1.0)
        if readable and not sys.stdin.readline():
            if not stop.ready():
                stop.send(True)
            return


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
