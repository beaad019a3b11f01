"""A seeded generator of GPU demand history: daily and weekly seasons, a trend, noise.

For tests, the demo and benchmarks: what the decision log's ``gpu_demand`` would hold
after ``days`` of creates. Per stream (a GPU model in a zone) the hourly rate of
requests is::

    rate(t) = base * (1 + trend * days since start)
                   * (1 + daily * cos(2 pi (hour of day - peak_hour) / 24))
                   * (weekend if Saturday or Sunday else 1)

Requests per hour are Poisson draws of the rate; each asks 1, 2, 4 or 8 GPUs (``sizes``
and their weights) and is refused with probability ``refused``. Rows carry decision
ids made from the seed, so a seed gives the same history every time.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from cortex.forecast.plan import hour_floor


@dataclass(frozen=True)
class DemandStream:
    """One model in one zone: requests per hour at the start, and the shape around it.

    ``trend``: relative growth per day; ``daily``: the day's amplitude (0..1);
    ``weekend``: the weekend's factor; ``peak_hour``: the busiest hour (UTC);
    ``flavor_family``: requests of ``n`` GPUs come with flavor ``flavor_name`` formatted
    with ``family`` and ``gpus`` (default ``<family>.<n>gpu``).
    """

    model: str
    availability_zone: str | None
    base: float
    trend: float = 0.01
    daily: float = 0.5
    weekend: float = 0.5
    peak_hour: int = 14
    refused: float = 0.02
    sizes: Sequence[int] = (1, 2, 4, 8)
    size_weights: Sequence[float] = (0.4, 0.3, 0.2, 0.1)
    flavor_family: str = "gpu"
    flavor_name: str = "{family}.{gpus}gpu"

    def rate(self, start: datetime, at: datetime) -> float:
        """Expected requests in the hour beginning ``at``."""
        day = (at - start) / timedelta(days=1)
        daily = 1 + self.daily * math.cos(2 * math.pi * (at.hour - self.peak_hour) / 24)
        weekly = self.weekend if at.weekday() >= 5 else 1.0
        return max(0.0, self.base * (1 + self.trend * day) * daily * weekly)


#: Streams of the demo fleet's models (``etc/cortex/demo-fleet.yaml``); the H100 flavors are
#: named as its servers' ``g1.2xh100`` is.
DEMO_STREAMS = (
    DemandStream("NVIDIA H100 80GB HBM3", "az-1", 0.25, trend=0.012, flavor_family="g1",
                 flavor_name="{family}.{gpus}xh100"),
    DemandStream("NVIDIA A100 80GB PCIe", "az-1", 0.1, trend=0.004, weekend=0.6,
                 flavor_family="a1"),
    DemandStream("NVIDIA L40S", "az-1", 0.08, trend=0.0, daily=0.3, flavor_family="l1"),
)


def generate(streams: Sequence[DemandStream], end: datetime, days: float = 90,
             seed: int = 0, service: str = "nova") -> Iterator[dict[str, Any]]:
    """``gpu_demand`` rows of ``days`` ending at ``end`` (UTC), oldest first.

    Each row is a create at a uniform moment within its hour; ``host`` is None (the
    rows say nothing of where); ``power_delta_watts`` is None for refusals and 300 W a
    GPU otherwise.
    """
    rng = np.random.default_rng(seed)
    end = hour_floor(end)
    start = end - timedelta(days=days)
    hours = int((end - start) / timedelta(hours=1))
    weights = [np.asarray(s.size_weights, dtype=float) / sum(s.size_weights) for s in streams]
    for hour in range(hours):
        at = start + timedelta(hours=hour)
        for stream, p in zip(streams, weights, strict=True):
            for _ in range(int(rng.poisson(stream.rate(start, at)))):
                gpus = int(rng.choice(stream.sizes, p=p))
                refused = bool(rng.random() < stream.refused)
                moment = at + timedelta(seconds=float(rng.uniform(0, 3600)))
                yield {"decision_id": str(uuid.UUID(int=int(rng.integers(0, 2**63)) << 64
                                                    | hour, version=4)),
                       "created_at": moment, "service": service, "model": stream.model,
                       "flavor": stream.flavor_name.format(family=stream.flavor_family,
                                                           gpus=gpus),
                       "availability_zone": stream.availability_zone, "gpus": gpus,
                       "vgpus": 0, "instances": 1,
                       "outcome": "refused" if refused else "placed",
                       "host": None, "power_delta_watts": None if refused else 300.0 * gpus}
