"""The options the topology filters share, and their verdict on a host without a report."""

from __future__ import annotations

from dataclasses import dataclass

UNKNOWN_POLICIES = ("pass", "fail")


@dataclass(frozen=True)
class TopologyOptions:
    """Options of the topology filters.

    ``unknown_topology``: a host without an agent report ``pass``es (Nova already checked
    it with what Nova knows) or ``fail``s (only hosts Cortex can vouch for).
    """

    unknown_topology: str = "pass"

    def __post_init__(self) -> None:
        if self.unknown_topology not in UNKNOWN_POLICIES:
            raise ValueError(f"unknown_topology must be one of {', '.join(UNKNOWN_POLICIES)}")


def unknown_topology(options: TopologyOptions) -> str | None:
    """The verdict on a host with no topology report: None (pass) or the reason."""
    return None if options.unknown_topology == "pass" else "no topology report from cortex-agent"
