"""The options of the capacity weighers that can weigh Nova's measure or Cortex's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class MeasureOptions:
    """``measure``: ``free_share`` (Cortex's) or the weigher's Nova measure (:attr:`NOVA`).

    The share is what stays free after placing the request; Nova's measure (``free_mb``,
    ``free_vcpus``) is the amount free before it, as Nova's weigher counts it. A value
    outside the two is refused.
    """

    measure: str = "free_share"
    NOVA: ClassVar[str] = ""

    def __post_init__(self) -> None:
        """Refuse a measure outside the two."""
        if self.measure not in ("free_share", self.NOVA):
            raise ValueError(f"measure must be one of free_share, {self.NOVA}")


@dataclass(frozen=True)
class FreeMbOptions(MeasureOptions):
    """:class:`MeasureOptions` of the RAM and disk weighers: Nova's ``free_mb``."""

    NOVA: ClassVar[str] = "free_mb"


@dataclass(frozen=True)
class FreeVcpusOptions(MeasureOptions):
    """:class:`MeasureOptions` of the CPU weigher: Nova's ``free_vcpus``."""

    NOVA: ClassVar[str] = "free_vcpus"
