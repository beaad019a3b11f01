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
    Integer,
    String,
    UniqueConstraint,
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
    nodes has its host-wide facts written on each node.
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
    shares on the pool) come from the syncers (revision 0004).
    """

    __tablename__ = "storage_pools"
    __table_args__ = (UniqueConstraint("service", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    service: Mapped[str] = mapped_column(String(16), nullable=False)
    name: Mapped[str] = mapped_column(String(255), nullable=False)
    availability_zone: Mapped[str | None] = mapped_column(String(255))
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
    """One scheduling call: its inputs, each step's per-host results and the answer."""

    __tablename__ = "decisions"

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
    record: Mapped[dict] = mapped_column(JSONType, nullable=False)
