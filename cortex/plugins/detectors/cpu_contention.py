"""detector_cpu_contention: move the busiest instance off a KVM host whose CPUs are contended.

Rule: a host whose Prometheus features (``cpu.steal``, the hypervisor's steal time, and
``cpu.contention``, its run-queue contention; fractions 0..1 over the sync's query
window, see ``etc/cortex/prometheus-queries.yaml``) reach ``threshold`` sheds its
busiest active instance (the highest ``cpu_busy``), the one whose move relieves the host
most. Enabled, up hosts only; instances in a task (Nova's ``task_state``) or not
``active`` are left alone. The reference implementation's descheduler detects CPU steal
on KVM hosts the same way; Nova has nothing like it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cortex.knowledge.view import KnowledgeView
from cortex.plugins.base import Detector, MoveCandidate
from cortex.plugins.registry import register


@dataclass(frozen=True)
class CpuContentionOptions:
    """``features`` read (the highest counts), ``threshold`` (0..1] that marks a host."""

    features: tuple[str, ...] = ("cpu.steal", "cpu.contention")
    threshold: float = 0.1

    def __post_init__(self) -> None:
        if not 0 < self.threshold <= 1:
            raise ValueError(f"threshold {self.threshold} must be in (0, 1]")
        if not self.features:
            raise ValueError("features must name at least one feature")


@register
class CpuContentionDetector(Detector):
    """Hosts at or above the contention threshold: their busiest active instance."""

    name = "detector_cpu_contention"
    Options = CpuContentionOptions

    def detect(self, view: KnowledgeView, now: Any) -> list[MoveCandidate]:
        """One candidate per contended host, scored by the host's contention."""
        found = []
        for name, host in view.hosts.items():
            if not (host.enabled and host.up):
                continue
            measured = [(host.features[f], f) for f in self.options.features
                        if f in host.features]
            if not measured:
                continue
            value, feature = max(measured)
            if value < self.options.threshold:
                continue
            movable = [i for i in host.instances
                       if i.vm_state in (None, "active") and not i.task_state]
            if not movable:
                continue
            busiest = max(movable, key=lambda i: (i.cpu_busy, i.uuid))
            found.append(MoveCandidate(
                busiest.uuid, name, self.name,
                f"{feature} {value:.2f} >= {self.options.threshold:.2f} on {name}; its "
                f"busiest instance (cpu_busy {busiest.cpu_busy:.2f})", score=value))
        return found
