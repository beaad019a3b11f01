"""SQLAlchemy models of the knowledge tables and the decision log.

Names follow Nova and Placement: a compute host runs one nova-compute service and
owns one or more nodes (``hypervisor_hostname``); each node is a Placement root
resource provider with inventories per resource class. Cinder and Manila pools are
``host@backend#pool``. Schema changes go through Alembic (``migrations/``), never
``create_all`` outside tests of the models themselves.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

JSONType = JSON().with_variant(JSONB(), "postgresql")


class Base(DeclarativeBase):
    """Declarative base of every Cortex table."""


class KnowledgeVersion(Base):
    """A single row whose ``version`` is bumped whenever knowledge tables change.

    API workers compare it with the version of their in-memory view and rebuild the
    view only when it moved.
    """

    __tablename__ = "knowledge_version"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)


class Aggregate(Base):
    """A Nova host aggregate; ``availability_zone`` mirrors its metadata key of that name."""

    __tablename__ = "aggregates"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(36), unique=True, nullable=False)
    name: Mapped[str] = mapped_column(String(255), nullable=False)
    availability_zone: Mapped[str | None] = mapped_column(String(255))
    metadata_: Mapped[dict] = mapped_column("metadata", JSONType, nullable=False, default=dict)
    hosts: Mapped[list[AggregateHost]] = relationship(
        back_populates="aggregate", cascade="all, delete-orphan")


class AggregateHost(Base):
    """Membership of a compute host (service host name) in an aggregate."""

    __tablename__ = "aggregate_hosts"
    __table_args__ = (UniqueConstraint("aggregate_id", "host"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    aggregate_id: Mapped[int] = mapped_column(
        ForeignKey("aggregates.id", ondelete="CASCADE"), nullable=False)
    host: Mapped[str] = mapped_column(String(255), nullable=False, index=True)
    aggregate: Mapped[Aggregate] = relationship(back_populates="hosts")


class ComputeNode(Base):
    """One node of a nova-compute service: the Placement root resource provider.

    ``uuid`` is the compute node uuid, which is also the provider uuid. ``enabled``
    is the service status (disabled by an operator), ``up`` its liveness.

    The syncers fill the host facts kept as JSON (revision 0004); a fleet file may
    carry them too: ``features`` ``{name: float}`` (Prometheus), ``cpu_features``
    ``[flag]``, ``instances`` ``[{uuid, project_id?, vm_state?, task_state?,
    cpu_busy?}]``, ``migrations`` ``[{uuid, instance_uuid?, source_host?, dest_host?,
    status, resources?: {RC: int}}]`` (claims Placement's usage does not show yet),
    ``failed_builds`` and ``allowed_projects`` ``[project id]``. A host with several
    nodes has its host-wide facts written on each node. Revision 0018 adds the
    hypervisor's ``cpu_info`` (object), ``host_ip`` and ``supported_instances``
    (``[[arch, hv_type, vm_mode]]``, NULL when not reported).
    """

    __tablename__ = "compute_nodes"
    __table_args__ = (UniqueConstraint("host", "node"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host: Mapped[str] = mapped_column(String(255), nullable=False, index=True)
    node: Mapped[str] = mapped_column(String(255), nullable=False)
    uuid: Mapped[str] = mapped_column(String(36), unique=True, nullable=False)
    availability_zone: Mapped[str | None] = mapped_column(String(255))
    hypervisor_type: Mapped[str | None] = mapped_column(String(255))
    hypervisor_version: Mapped[int | None] = mapped_column(BigInteger)
    cpu_arch: Mapped[str | None] = mapped_column(String(32))
    enabled: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True)
    up: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True)
    disabled_reason: Mapped[str | None] = mapped_column(String(255))
    traits: Mapped[list[str]] = mapped_column(JSONType, nullable=False, default=list)
    features: Mapped[dict] = mapped_column(
        JSONType, nullable=False, default=dict, server_default=text("'{}'"))
    cpu_features: Mapped[list[str]] = mapped_column(
        JSONType, nullable=False, default=list, server_default=text("'[]'"))
    instances: Mapped[list[dict]] = mapped_column(
        JSONType, nullable=False, default=list, server_default=text("'[]'"))
    migrations: Mapped[list[dict]] = mapped_column(
        JSONType, nullable=False, default=list, server_default=text("'[]'"))
    failed_builds: Mapped[int] = mapped_column(
        Integer, nullable=False, default=0, server_default=text("0"))
    allowed_projects: Mapped[list[str]] = mapped_column(
        JSONType, nullable=False, default=list, server_default=text("'[]'"))
    cpu_info: Mapped[dict] = mapped_column(
        JSONType, nullable=False, default=dict, server_default=text("'{}'"))
    host_ip: Mapped[str | None] = mapped_column(String(64))
    supported_instances: Mapped[list | None] = mapped_column(JSONType)
    inventories: Mapped[list[ResourceInventory]] = relationship(
        back_populates="compute_node", cascade="all, delete-orphan")


class ResourceInventory(Base):
    """Inventory and current usage of one resource class on one compute node.

    Fields and meaning are Placement's: capacity is
    ``(total - reserved) * allocation_ratio``; a request of ``n`` units fits when
    ``used + n <= capacity`` and ``min_unit <= n <= max_unit`` and ``n % step_size == 0``.
    """

    __tablename__ = "resource_inventories"
    __table_args__ = (UniqueConstraint("compute_node_id", "resource_class"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    compute_node_id: Mapped[int] = mapped_column(
        ForeignKey("compute_nodes.id", ondelete="CASCADE"), nullable=False)
    resource_class: Mapped[str] = mapped_column(String(255), nullable=False)
    total: Mapped[int] = mapped_column(BigInteger, nullable=False)
    reserved: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
    min_unit: Mapped[int] = mapped_column(BigInteger, nullable=False, default=1)
    max_unit: Mapped[int] = mapped_column(BigInteger, nullable=False)
    step_size: Mapped[int] = mapped_column(BigInteger, nullable=False, default=1)
    allocation_ratio: Mapped[float] = mapped_column(Float, nullable=False, default=1.0)
    used: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
    compute_node: Mapped[ComputeNode] = relationship(back_populates="inventories")


class StoragePool(Base):
    """A Cinder or Manila back-end pool as the scheduler's ``get_pools`` reports it.

    ``name`` is ``host@backend#pool``, the caller's host identity. Capacities are GiB.
    ``features`` (Prometheus, ``{name: float}``) and ``resource_count`` (volumes or
    shares on the pool) come from the syncers (revision 0004). ``availability_zone`` is
    the zone's name, ``availability_zone_id`` its UUID where the service has one
    (Manila's ``GET /availability-zones``; revision 0017).
    """

    __tablename__ = "storage_pools"
    __table_args__ = (UniqueConstraint("service", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    service: Mapped[str] = mapped_column(String(16), nullable=False)
    name: Mapped[str] = mapped_column(String(255), nullable=False)
    availability_zone: Mapped[str | None] = mapped_column(String(255))
    availability_zone_id: Mapped[str | None] = mapped_column(String(36))
    total_capacity_gb: Mapped[float] = mapped_column(Float, nullable=False)
    free_capacity_gb: Mapped[float] = mapped_column(Float, nullable=False)
    allocated_capacity_gb: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    provisioned_capacity_gb: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    reserved_percentage: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    max_over_subscription_ratio: Mapped[float] = mapped_column(
        Float, nullable=False, default=1.0)
    thin_provisioning_support: Mapped[bool] = mapped_column(
        Boolean, nullable=False, default=False)
    thick_provisioning_support: Mapped[bool] = mapped_column(
        Boolean, nullable=False, default=True)
    capabilities: Mapped[dict] = mapped_column(JSONType, nullable=False, default=dict)
    features: Mapped[dict] = mapped_column(
        JSONType, nullable=False, default=dict, server_default=text("'{}'"))
    resource_count: Mapped[int] = mapped_column(
        Integer, nullable=False, default=0, server_default=text("0"))


class Decision(Base):
    """One scheduling call: its inputs, each step's per-host results and the answer.

    ``cause``: why a call found no host (:attr:`cortex.decision.Decision.refusal`, the
    step that removed the last hosts), None for every other call; the partial index
    ``ix_decisions_refusals`` keeps the refusals of a day cheap to count.
    """

    __tablename__ = "decisions"
    __table_args__ = (
        Index("ix_decisions_refusals", "created_at",
              postgresql_where=text("cause IS NOT NULL"),
              sqlite_where=text("cause IS NOT NULL")),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, index=True)
    service: Mapped[str] = mapped_column(String(16), nullable=False)
    pipeline: Mapped[str | None] = mapped_column(String(255))
    request_id: Mapped[str | None] = mapped_column(String(255), index=True)
    global_request_id: Mapped[str | None] = mapped_column(String(255))
    resource_id: Mapped[str | None] = mapped_column(String(255), index=True)
    intent: Mapped[str | None] = mapped_column(String(32))
    outcome: Mapped[str] = mapped_column(String(32), nullable=False)
    duration_ms: Mapped[float] = mapped_column(Float, nullable=False)
    cause: Mapped[str | None] = mapped_column(String(255))
    record: Mapped[dict] = mapped_column(JSON, nullable=False)


class HostTopology(Base):
    """The latest topology report of one compute host (``cortex-agent``), with its time.

    ``host`` is the nova-compute service host name. The report's parts live in
    ``numa_cells``, ``gpus`` (with ``mig_instances``) and ``gpu_links``; a new report
    replaces all of them. CPU lists are stored in the kernel's text form (``0-3,8``).
    ``cpu_info`` and ``host_ip`` are the host facts the agent reads from the kernel and
    ``nova.conf`` (revision 0020).
    """

    __tablename__ = "host_topologies"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host: Mapped[str] = mapped_column(String(255), unique=True, nullable=False)
    reported_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    collected_at: Mapped[str | None] = mapped_column(String(64))
    agent_version: Mapped[str | None] = mapped_column(String(64))
    driver_version: Mapped[str | None] = mapped_column(String(64))
    cuda_driver_version: Mapped[str | None] = mapped_column(String(32))
    nvml_error: Mapped[str | None] = mapped_column(Text)
    guests: Mapped[int | None] = mapped_column(Integer)
    nics: Mapped[list] = mapped_column(JSONType, nullable=False, default=list)
    cpu_info: Mapped[dict] = mapped_column(
        JSONType, nullable=False, default=dict, server_default=text("'{}'"))
    host_ip: Mapped[str | None] = mapped_column(String(64))
    cells: Mapped[list[NumaCell]] = relationship(
        back_populates="topology", cascade="all, delete-orphan", order_by="NumaCell.cell_id")
    gpus: Mapped[list[Gpu]] = relationship(
        back_populates="topology", cascade="all, delete-orphan", order_by="Gpu.pci_address")
    links: Mapped[list[GpuLink]] = relationship(
        back_populates="topology", cascade="all, delete-orphan",
        order_by="(GpuLink.gpu_a, GpuLink.gpu_b)")


class NumaCell(Base):
    """A host NUMA cell as Nova models it.

    CPUs (all, dedicated, shared), SMT siblings, socket, memory and guests' usage in MiB,
    pinned CPUs, pages per size and distances.
    """

    __tablename__ = "numa_cells"
    __table_args__ = (UniqueConstraint("host_topology_id", "cell_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host_topology_id: Mapped[int] = mapped_column(
        ForeignKey("host_topologies.id", ondelete="CASCADE"), nullable=False)
    cell_id: Mapped[int] = mapped_column(Integer, nullable=False)
    socket: Mapped[int | None] = mapped_column(Integer)
    cpus: Mapped[str] = mapped_column(Text, nullable=False)
    dedicated_cpus: Mapped[str] = mapped_column(Text, nullable=False)
    shared_cpus: Mapped[str] = mapped_column(Text, nullable=False)
    siblings: Mapped[list] = mapped_column(JSONType, nullable=False)
    memory_mb: Mapped[int] = mapped_column(BigInteger, nullable=False)
    memory_usage_mb: Mapped[int] = mapped_column(BigInteger, nullable=False)
    cpu_usage: Mapped[int] = mapped_column(Integer, nullable=False)
    pinned_cpus: Mapped[str] = mapped_column(Text, nullable=False)
    mempages: Mapped[list] = mapped_column(JSONType, nullable=False)
    distances: Mapped[list] = mapped_column(JSONType, nullable=False)
    topology: Mapped[HostTopology] = relationship(back_populates="cells")


class Gpu(Base):
    """One GPU of a host by PCI address, with what NVML and sysfs said of it.

    ``in_use`` says whether a guest holds it, ``in_use_source`` who said so (placement,
    agent or fleet), ``instance_uuid`` which Nova instance holds it passed through, when
    known, ``power_watts`` its draw when the report was collected (NVML), when known.
    """

    __tablename__ = "gpus"
    __table_args__ = (UniqueConstraint("host_topology_id", "pci_address"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host_topology_id: Mapped[int] = mapped_column(
        ForeignKey("host_topologies.id", ondelete="CASCADE"), nullable=False)
    pci_address: Mapped[str] = mapped_column(String(32), nullable=False)
    gpu_index: Mapped[int | None] = mapped_column(Integer)
    uuid: Mapped[str | None] = mapped_column(String(64))
    name: Mapped[str | None] = mapped_column(String(255))
    vendor_id: Mapped[str] = mapped_column(String(4), nullable=False)
    device_id: Mapped[str | None] = mapped_column(String(4))
    dev_type: Mapped[str] = mapped_column(String(16), nullable=False)
    driver: Mapped[str | None] = mapped_column(String(64))
    memory_mb: Mapped[int | None] = mapped_column(BigInteger)
    numa_node: Mapped[int | None] = mapped_column(Integer)
    numa_source: Mapped[str | None] = mapped_column(String(32))
    pci_numa_node: Mapped[int | None] = mapped_column(Integer)
    cpu_affinity: Mapped[str | None] = mapped_column(Text)
    mig_mode: Mapped[str | None] = mapped_column(String(16))
    mig_pending: Mapped[str | None] = mapped_column(String(16))
    virtualization_mode: Mapped[str | None] = mapped_column(String(16))
    compute_capability: Mapped[str | None] = mapped_column(String(8))
    healthy: Mapped[bool] = mapped_column(Boolean, nullable=False)
    health_reasons: Mapped[list] = mapped_column(JSONType, nullable=False)
    in_use: Mapped[bool] = mapped_column(Boolean, nullable=False)
    in_use_source: Mapped[str | None] = mapped_column(String(16))
    vgpus_in_use: Mapped[int] = mapped_column(Integer, nullable=False)
    fabric_clique: Mapped[int | None] = mapped_column(BigInteger)
    fabric_cluster: Mapped[str | None] = mapped_column(String(36))
    unsupported: Mapped[list] = mapped_column(JSONType, nullable=False)
    instance_uuid: Mapped[str | None] = mapped_column(String(36))
    power_watts: Mapped[float | None] = mapped_column(Float)
    topology: Mapped[HostTopology] = relationship(back_populates="gpus")
    mig_instances: Mapped[list[MigInstance]] = relationship(
        back_populates="gpu", cascade="all, delete-orphan", order_by="MigInstance.instance_id")


class GpuLink(Base):
    """A pair of GPUs (``gpu_a`` < ``gpu_b``, PCI addresses).

    Active NVLinks, NVLink P2P status and the PCIe common-ancestor level (INTERNAL ...
    SYSTEM).
    """

    __tablename__ = "gpu_links"
    __table_args__ = (UniqueConstraint("host_topology_id", "gpu_a", "gpu_b"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host_topology_id: Mapped[int] = mapped_column(
        ForeignKey("host_topologies.id", ondelete="CASCADE"), nullable=False)
    gpu_a: Mapped[str] = mapped_column(String(32), nullable=False)
    gpu_b: Mapped[str] = mapped_column(String(32), nullable=False)
    nvlink: Mapped[int] = mapped_column(Integer, nullable=False)
    p2p_nvlink: Mapped[str | None] = mapped_column(String(32))
    topology_level: Mapped[str | None] = mapped_column(String(16))
    topology: Mapped[HostTopology] = relationship(back_populates="links")


class MigInstance(Base):
    """A MIG GPU instance of a GPU: NVML id, profile (``3g.40gb``), placement, memory MiB."""

    __tablename__ = "mig_instances"
    __table_args__ = (UniqueConstraint("gpu_id", "instance_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpus.id", ondelete="CASCADE"),
                                        nullable=False)
    instance_id: Mapped[int] = mapped_column(Integer, nullable=False)
    profile_id: Mapped[int] = mapped_column(Integer, nullable=False)
    profile: Mapped[str] = mapped_column(String(32), nullable=False)
    placement_start: Mapped[int] = mapped_column(Integer, nullable=False)
    placement_size: Mapped[int] = mapped_column(Integer, nullable=False)
    memory_mb: Mapped[int] = mapped_column(BigInteger, nullable=False)
    in_use: Mapped[bool] = mapped_column(Boolean, nullable=False)
    gpu: Mapped[Gpu] = relationship(back_populates="mig_instances")
# --- Synced tables (cortex.sync): the cloud's own records, one snapshot per source. ---
#
# Nova, Placement, Keystone and Prometheus facts as their APIs report them, written
# by ``cortex-sync``; the knowledge tables above are filled from them (compute nodes
# and inventories from hypervisors + resource providers, aggregates and storage
# pools directly). Times are UTC.


class Hypervisor(Base):
    """A Nova hypervisor (compute node) with its nova-compute service (API >= 2.53).

    ``uuid`` is the compute node uuid and the Placement root provider uuid; ``node``
    is ``hypervisor_hostname``; ``host`` the service host. ``state`` is the
    service's liveness (``up``/``down``), ``status`` its operator status
    (``enabled``/``disabled``); ``zone`` is the service's availability zone;
    ``cpu_arch``/``cpu_features`` come from ``cpu_info`` (only before API 2.88).
    """

    __tablename__ = "hypervisors"

    uuid: Mapped[str] = mapped_column(String(36), primary_key=True)
    node: Mapped[str] = mapped_column(String(255), nullable=False)
    host: Mapped[str] = mapped_column(String(255), nullable=False, index=True)
    service_id: Mapped[str | None] = mapped_column(String(36))
    state: Mapped[str | None] = mapped_column(String(16))
    status: Mapped[str | None] = mapped_column(String(16))
    disabled_reason: Mapped[str | None] = mapped_column(String(255))
    forced_down: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    zone: Mapped[str | None] = mapped_column(String(255))
    hypervisor_type: Mapped[str | None] = mapped_column(String(255))
    hypervisor_version: Mapped[int | None] = mapped_column(BigInteger)
    host_ip: Mapped[str | None] = mapped_column(String(64))
    cpu_arch: Mapped[str | None] = mapped_column(String(32))
    cpu_features: Mapped[list[str]] = mapped_column(JSONType, nullable=False, default=list)
    cpu_info: Mapped[dict] = mapped_column(
        JSONType, nullable=False, default=dict, server_default=text("'{}'"))


class Server(Base):
    """A Nova server (instance) of any project, as ``GET /servers/detail`` reports it.

    ``host``/``node`` are ``OS-EXT-SRV-ATTR:host``/``:hypervisor_hostname``;
    ``flavor`` is the embedded flavor (API >= 2.47: vcpus, ram, disk, ephemeral,
    swap, original_name, extra_specs).
    """

    __tablename__ = "servers"

    uuid: Mapped[str] = mapped_column(String(36), primary_key=True)
    name: Mapped[str | None] = mapped_column(String(255))
    host: Mapped[str | None] = mapped_column(String(255), index=True)
    node: Mapped[str | None] = mapped_column(String(255))
    status: Mapped[str | None] = mapped_column(String(32))
    vm_state: Mapped[str | None] = mapped_column(String(32))
    task_state: Mapped[str | None] = mapped_column(String(64))
    project_id: Mapped[str | None] = mapped_column(String(255), index=True)
    user_id: Mapped[str | None] = mapped_column(String(255))
    availability_zone: Mapped[str | None] = mapped_column(String(255))
    flavor_name: Mapped[str | None] = mapped_column(String(255))
    flavor: Mapped[dict] = mapped_column(JSONType, nullable=False, default=dict)
    created_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Flavor(Base):
    """A Nova flavor with its extra specs (API >= 2.61 lists them inline)."""

    __tablename__ = "flavors"

    id: Mapped[str] = mapped_column(String(255), primary_key=True)
    name: Mapped[str] = mapped_column(String(255), nullable=False)
    vcpus: Mapped[int] = mapped_column(Integer, nullable=False)
    ram: Mapped[int] = mapped_column(BigInteger, nullable=False)
    disk: Mapped[int] = mapped_column(BigInteger, nullable=False)
    ephemeral: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
    swap: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
    is_public: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True)
    is_disabled: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    description: Mapped[str | None] = mapped_column(Text)
    extra_specs: Mapped[dict] = mapped_column(JSONType, nullable=False, default=dict)


class ServerGroup(Base):
    """A Nova server group: ``policy`` (affinity, anti-affinity, soft-*), ``rules``, members."""

    __tablename__ = "server_groups"

    uuid: Mapped[str] = mapped_column(String(36), primary_key=True)
    name: Mapped[str | None] = mapped_column(String(255))
    policy: Mapped[str | None] = mapped_column(String(64))
    rules: Mapped[dict] = mapped_column(JSONType, nullable=False, default=dict)
    members: Mapped[list[str]] = mapped_column(JSONType, nullable=False, default=list)
    project_id: Mapped[str | None] = mapped_column(String(255))
    user_id: Mapped[str | None] = mapped_column(String(255))


class ServerMigration(Base):
    """An in-progress Nova migration; it holds resources on source and destination node."""

    __tablename__ = "server_migrations"

    uuid: Mapped[str] = mapped_column(String(36), primary_key=True)
    server_uuid: Mapped[str | None] = mapped_column(String(36), index=True)
    migration_type: Mapped[str | None] = mapped_column(String(32))
    status: Mapped[str | None] = mapped_column(String(32))
    source_compute: Mapped[str | None] = mapped_column(String(255))
    source_node: Mapped[str | None] = mapped_column(String(255))
    dest_compute: Mapped[str | None] = mapped_column(String(255))
    dest_node: Mapped[str | None] = mapped_column(String(255))
    old_flavor_id: Mapped[str | None] = mapped_column(String(255))
    new_flavor_id: Mapped[str | None] = mapped_column(String(255))
    project_id: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class ResourceProvider(Base):
    """A Placement resource provider; trees by ``root_provider_uuid``/``parent_provider_uuid``.

    A compute node is a root; its PCI devices and vGPU types are children named
    ``<node>_<pci address>``. ``generation`` is Placement's: it moves whenever the
    provider's inventories, traits, aggregates or allocations change.
    """

    __tablename__ = "resource_providers"

    uuid: Mapped[str] = mapped_column(String(36), primary_key=True)
    name: Mapped[str] = mapped_column(String(255), nullable=False)
    generation: Mapped[int] = mapped_column(BigInteger, nullable=False)
    root_provider_uuid: Mapped[str] = mapped_column(String(36), nullable=False, index=True)
    parent_provider_uuid: Mapped[str | None] = mapped_column(String(36))


class ProviderInventory(Base):
    """Inventory and usage of one resource class on one Placement provider (any level)."""

    __tablename__ = "provider_inventories"

    provider_uuid: Mapped[str] = mapped_column(
        ForeignKey("resource_providers.uuid", ondelete="CASCADE"), primary_key=True)
    resource_class: Mapped[str] = mapped_column(String(255), primary_key=True)
    total: Mapped[int] = mapped_column(BigInteger, nullable=False)
    reserved: Mapped[int] = mapped_column(BigInteger, nullable=False)
    min_unit: Mapped[int] = mapped_column(BigInteger, nullable=False)
    max_unit: Mapped[int] = mapped_column(BigInteger, nullable=False)
    step_size: Mapped[int] = mapped_column(BigInteger, nullable=False)
    allocation_ratio: Mapped[float] = mapped_column(Float, nullable=False)
    used: Mapped[int] = mapped_column(BigInteger, nullable=False)


class ProviderTrait(Base):
    """A trait of a Placement provider."""

    __tablename__ = "provider_traits"

    provider_uuid: Mapped[str] = mapped_column(
        ForeignKey("resource_providers.uuid", ondelete="CASCADE"), primary_key=True)
    trait: Mapped[str] = mapped_column(String(255), primary_key=True)


class ProviderAggregate(Base):
    """Membership of a Placement provider in an aggregate (a Nova aggregate's uuid)."""

    __tablename__ = "provider_aggregates"

    provider_uuid: Mapped[str] = mapped_column(
        ForeignKey("resource_providers.uuid", ondelete="CASCADE"), primary_key=True)
    aggregate_uuid: Mapped[str] = mapped_column(String(36), primary_key=True)


class Domain(Base):
    """A Keystone domain."""

    __tablename__ = "domains"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(255), nullable=False)
    enabled: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True)
    description: Mapped[str | None] = mapped_column(Text)


class Project(Base):
    """A Keystone project (``parent_id`` for project hierarchies)."""

    __tablename__ = "projects"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(255), nullable=False)
    domain_id: Mapped[str | None] = mapped_column(String(64), index=True)
    parent_id: Mapped[str | None] = mapped_column(String(64))
    enabled: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True)
    is_domain: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    description: Mapped[str | None] = mapped_column(Text)


class PrometheusSample(Base):
    """One sample of a range-query feature: ``value`` at ``ts`` for a host's series.

    ``series`` names the series within the host (its other identifying labels,
    ``gpu="0",UUID="GPU-…"`` sorted), empty for one series per host.
    """

    __tablename__ = "prometheus_samples"

    feature: Mapped[str] = mapped_column(String(255), primary_key=True)
    host: Mapped[str] = mapped_column(String(255), primary_key=True)
    series: Mapped[str] = mapped_column(String(1024), primary_key=True)
    ts: Mapped[datetime] = mapped_column(DateTime(timezone=True), primary_key=True)
    value: Mapped[float] = mapped_column(Float, nullable=False)


class PrometheusLatest(Base):
    """The newest value of an instant-query feature per host series (a snapshot)."""

    __tablename__ = "prometheus_latest"

    feature: Mapped[str] = mapped_column(String(255), primary_key=True)
    host: Mapped[str] = mapped_column(String(255), primary_key=True)
    series: Mapped[str] = mapped_column(String(1024), primary_key=True)
    ts: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    value: Mapped[float] = mapped_column(Float, nullable=False)


class HostFeature(Base):
    """A derived per-host feature (GPU utilization, allocated GPUs, instances, ...).

    Recomputed by the sync from the synced tables of ``source`` whenever that
    source changed; ``unit`` is a base unit (``ratio``, ``bytes``, ``watts``, ``count``).
    """

    __tablename__ = "host_features"

    host: Mapped[str] = mapped_column(String(255), primary_key=True)
    feature: Mapped[str] = mapped_column(String(255), primary_key=True)
    source: Mapped[str] = mapped_column(String(32), nullable=False, index=True)
    value: Mapped[float] = mapped_column(Float, nullable=False)
    unit: Mapped[str] = mapped_column(String(32), nullable=False)
    observed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class SyncStatus(Base):
    """Per sync source: the last attempt, success and error, duration and rows written.

    ``rows`` counts the rows in the last successful snapshot, ``changed`` the rows
    it inserted, updated or deleted; ``owner`` is ``hostname:pid`` of the writer.
    """

    __tablename__ = "sync_status"

    source: Mapped[str] = mapped_column(String(32), primary_key=True)
    last_attempt_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_success_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_error_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_error: Mapped[str | None] = mapped_column(String(2048))
    consecutive_failures: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    duration_seconds: Mapped[float | None] = mapped_column(Float)
    rows: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
    changed: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
    owner: Mapped[str | None] = mapped_column(String(255))
    detail: Mapped[dict] = mapped_column(JSONType, nullable=False, default=dict)


class NetworkDomain(Base):
    """A leaf or spine of the network fabric, as the topology file states it (revision 0005).

    ``kind`` is ``spine`` or ``leaf``; a leaf names its ``spine`` and optional NVL
    ``block``; ``uplink_gbps`` is the domain's uplink bandwidth in Gbit/s (None:
    unknown); ``adjacent`` lists the leaves the file calls adjacent (None: not stated,
    meaning every leaf of the same spine). ``source`` says where the row came from
    (``file``: ``cortex-manage network load``; ``prometheus``: the prometheus sync
    source's ``[network] prometheus_query``). One name, one row: the file's wins.
    """

    __tablename__ = "network_domains"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16), nullable=False)
    spine: Mapped[str | None] = mapped_column(String(255))
    block: Mapped[str | None] = mapped_column(String(255))
    uplink_gbps: Mapped[float | None] = mapped_column(Float)
    adjacent: Mapped[list[str] | None] = mapped_column(JSONType)
    source: Mapped[str] = mapped_column(String(32), nullable=False)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)


class NetworkLocation(Base):
    """A host's leaf (its spine and block are the leaf's); ``source`` as NetworkDomain's.

    One row per host: the file's wins over Prometheus's. A ``prometheus`` row may point
    at a ``file`` leaf (the file knows the leaf, Prometheus the host).
    """

    __tablename__ = "network_locations"

    host: Mapped[str] = mapped_column(String(255), primary_key=True)
    leaf: Mapped[str] = mapped_column(
        ForeignKey("network_domains.name", ondelete="CASCADE"), nullable=False, index=True)
    source: Mapped[str] = mapped_column(String(32), nullable=False)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)


class InflightReservation(Base):
    """Capacity Cortex promised and Placement does not show yet (see knowledge/reservations.py).

    ``resources`` ``{RC: int}``, ``gpus`` ``[pci address]`` predicted by the PCI claim
    model; ``group_id`` ties a multi-create's or server group's calls together. One row
    per instance: a later call for the same instance replaces it.
    """

    __tablename__ = "inflight_reservations"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    host: Mapped[str] = mapped_column(String(255), nullable=False, index=True)
    instance_uuid: Mapped[str | None] = mapped_column(String(36), unique=True)
    group_id: Mapped[str | None] = mapped_column(String(255), index=True)
    resources: Mapped[dict] = mapped_column(JSONType, nullable=False, default=dict)
    gpus: Mapped[list[str]] = mapped_column(JSONType, nullable=False, default=list)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False,
                                                 index=True)


class GroupPromise(Base):
    """A gang's room, promised whole at its first member's call (cortex/store/group_promises.py).

    ``id`` the group's key; ``members`` asked, ``placed`` promised (at least
    ``min_count``); ``hosts`` and ``reservations`` (``inflight_reservations`` ids) in
    member order. Expires with its reservations.
    """

    __tablename__ = "group_promises"

    id: Mapped[str] = mapped_column(String(255), primary_key=True)
    service: Mapped[str] = mapped_column(String(32), nullable=False)
    members: Mapped[int] = mapped_column(Integer, nullable=False)
    placed: Mapped[int] = mapped_column(Integer, nullable=False)
    min_count: Mapped[int] = mapped_column(Integer, nullable=False)
    hosts: Mapped[list[str]] = mapped_column(JSONType, nullable=False)
    reservations: Mapped[list[str]] = mapped_column(JSONType, nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False,
                                                 index=True)


class Commitment(Base):
    """Capacity promised to a project for a period: ``count`` instances of one shape.

    The shape is ``vcpus`` (dedicated CPUs when ``gpus``), ``memory_mb`` and ``gpus``
    passthrough GPUs of one of ``products`` (PCI product ids; empty: any), one NVLink
    set each where the fleet has them; ``availability_zone`` where; ``start_at`` and
    ``end_at`` (UTC, years 1970-9999) when. Placed through the pipelines when created
    (revision 0008); its room is in ``commitment_holds``. ``idempotency_key`` and
    ``request_digest`` (revision 0016): the ``Idempotency-Key`` header and the body's
    SHA-256 of the POST that created it, so that a retry answers this one.
    """

    __tablename__ = "commitments"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    project_id: Mapped[str] = mapped_column(String(255), nullable=False, index=True)
    availability_zone: Mapped[str | None] = mapped_column(String(255))
    vcpus: Mapped[int] = mapped_column(Integer, nullable=False)
    memory_mb: Mapped[int] = mapped_column(Integer, nullable=False)
    gpus: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    products: Mapped[list[str]] = mapped_column(JSONType, nullable=False, default=list)
    count: Mapped[int] = mapped_column(Integer, nullable=False)
    start_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    end_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    description: Mapped[str | None] = mapped_column(String(255))
    idempotency_key: Mapped[str | None] = mapped_column(String(255), index=True, unique=True)
    request_digest: Mapped[str | None] = mapped_column(String(64))


class CommitmentHold(Base):
    """One committed instance's room on one host (revision 0008).

    ``resources`` ``{RC: int}`` and the ``gpus`` (PCI addresses) the PCI claim model
    predicts; ``baseline`` is the number of the owner's instances on the host when the
    hold was made (for consumption); ``instance_uuid`` the owner's instance that took
    it (revision 0009; the hold's host follows that instance).
    """

    __tablename__ = "commitment_holds"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    commitment_id: Mapped[str] = mapped_column(
        ForeignKey("commitments.id", ondelete="CASCADE"), nullable=False, index=True)
    host: Mapped[str] = mapped_column(String(255), nullable=False, index=True)
    resources: Mapped[dict] = mapped_column(JSONType, nullable=False, default=dict)
    gpus: Mapped[list[str]] = mapped_column(JSONType, nullable=False, default=list)
    baseline: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    instance_uuid: Mapped[str | None] = mapped_column(String(36))


class DeschedulerMove(Base):
    """One move of a ``cortex-descheduler`` run (revision 0009).

    ``state``: ``proposed`` (a dry run, or a kind of move not executed), ``skipped``
    (no acceptable target: ``detail`` says why), ``running`` (asked of Nova),
    ``completed``, ``failed`` or ``timed_out`` (``detail`` says what Nova answered);
    ``kind`` ``live`` or ``cold``; ``decision_id`` the recorded decision that chose
    the target; ``gpus_won`` whole-NVLink-cell GPUs freed net of the target's loss.
    """

    __tablename__ = "descheduler_moves"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    run_id: Mapped[str] = mapped_column(String(36), nullable=False, index=True)
    instance_uuid: Mapped[str] = mapped_column(String(36), nullable=False, index=True)
    project_id: Mapped[str | None] = mapped_column(String(255))
    detector: Mapped[str] = mapped_column(String(64), nullable=False)
    reason: Mapped[str] = mapped_column(Text, nullable=False)
    source_host: Mapped[str] = mapped_column(String(255), nullable=False)
    target_host: Mapped[str | None] = mapped_column(String(255))
    kind: Mapped[str] = mapped_column(String(8), nullable=False)
    state: Mapped[str] = mapped_column(String(16), nullable=False)
    detail: Mapped[str] = mapped_column(Text, nullable=False, default="", server_default="")
    decision_id: Mapped[str | None] = mapped_column(String(36))
    gpus_won: Mapped[int] = mapped_column(Integer, nullable=False, default=0,
                                          server_default="0")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False,
                                                 index=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class KubernetesNode(Base):
    """A Kubernetes node's labels as the extender last saw them (revision 0010).

    Written when kube-scheduler sends the Node object with labels that differ from the
    knowledge's; the loader gives the node its zone and labels from them.
    """

    __tablename__ = "kubernetes_nodes"

    name: Mapped[str] = mapped_column(String(253), primary_key=True)
    labels: Mapped[dict] = mapped_column(JSONType, nullable=False, default=dict)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)


class GpuDemand(Base):
    """One live decision that asked for GPUs, as demand (revision 0011).

    ``gpus``: whole GPUs over all ``instances`` of the call; ``vgpus``: vGPUs and MIG
    instances. ``model``: the GPU model asked for (or placed on), ``any`` when the request
    names none and nothing was placed; ``model_named``: whether the request named its model
    (revision 0024); ``flavor``: the flavor's name. ``outcome``:
    ``placed`` or ``refused``; ``power_delta_watts``: what the first host was expected to
    draw more (None when refused). Kept ``[forecast] demand_retention_days``, longer than
    the decision log.
    """

    __tablename__ = "gpu_demand"

    decision_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, index=True)
    service: Mapped[str] = mapped_column(String(16), nullable=False)
    model: Mapped[str] = mapped_column(String(255), nullable=False)
    model_named: Mapped[bool] = mapped_column(
        Boolean, nullable=False, default=False, server_default=false())
    flavor: Mapped[str | None] = mapped_column(String(255))
    availability_zone: Mapped[str | None] = mapped_column(String(255))
    gpus: Mapped[int] = mapped_column(Integer, nullable=False)
    vgpus: Mapped[int] = mapped_column(Integer, nullable=False)
    instances: Mapped[int] = mapped_column(Integer, nullable=False, server_default="1")
    outcome: Mapped[str] = mapped_column(String(16), nullable=False)
    host: Mapped[str | None] = mapped_column(String(255))
    power_delta_watts: Mapped[float | None] = mapped_column(Float)


class GpuForecast(Base):
    """The latest demand forecast of one GPU model in one availability zone (rev. 0011).

    ``document`` holds the series (history, forecast points with their interval, the
    projected GPUs in use) and the backtest, as ``GET /v1/forecasts`` answers them. A
    forecast of a flavor family (``flavor_family`` set) is of demand alone: no supply.
    """

    __tablename__ = "gpu_forecasts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    computed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    model: Mapped[str] = mapped_column(String(255), nullable=False)
    availability_zone: Mapped[str | None] = mapped_column(String(255))
    flavor_family: Mapped[str | None] = mapped_column(String(255))
    horizon_hours: Mapped[int] = mapped_column(Integer, nullable=False)
    supply_gpus: Mapped[int | None] = mapped_column(Integer)
    used_gpus: Mapped[int | None] = mapped_column(Integer)
    days_to_exhaustion: Mapped[float | None] = mapped_column(Float)
    days_to_exhaustion_pessimistic: Mapped[float | None] = mapped_column(Float)
    method: Mapped[str] = mapped_column(String(128), nullable=False)
    document: Mapped[dict] = mapped_column(JSONType, nullable=False)


class RequestShape(Base):
    """A request shape live calls brought, for warming fresh workers (revision 0013).

    ``id``: a digest of the shape (what the pipeline's kept step answers depend on, see
    :mod:`cortex.store.shapes`); ``body``: the latest body of that shape without its
    ``hosts`` and ``weights``; ``last_seen``: when a worker last met it first.
    """

    __tablename__ = "request_shapes"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    service: Mapped[str] = mapped_column(String(16), nullable=False)
    last_seen: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, index=True)
    body: Mapped[dict] = mapped_column(JSONType, nullable=False)
