"""Ask Nova to move an instance and follow the move to its end, through openstacksdk.

A live move is ``os-migrateLive`` with the target host, not forced (microversion 2.30
and later: Nova's scheduler, and so Cortex, checks the target again) and block
migration ``auto``; a cold move is ``migrate`` with the target host (2.56 and later),
then ``confirmResize`` once Nova reports ``VERIFY_RESIZE`` on the target. The move is
followed by reading the server every ``poll_interval`` seconds:

- done: the server is ``ACTIVE`` on the target with no task (live), or confirmed (cold);
- failed: ``ERROR``, or back to no task on the source (Nova rolled the move back;
  the live migration's own record says why, which Nova's server does not);
- timed out: neither within ``timeout`` seconds.

Errors from Nova's API (a refused action: 400 no valid host, 409 instance busy) are a
failed move with Nova's message, never an exception out of :meth:`NovaMover.move`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    """How a move ended: ``state`` completed, failed or timed_out; ``detail`` one line."""

    state: str
    detail: str


class NovaMover:
    """Moves instances through ``connection``'s compute proxy (an openstacksdk Connection)."""

    def __init__(self, connection: Any, timeout: float, poll_interval: float,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.compute = connection.compute
        self.timeout = timeout
        self.poll_interval = poll_interval
        self.clock = clock
        self.sleep = sleep

    def move(self, instance_uuid: str, source: str, target: str, kind: str) -> Outcome:
        """Move the instance from ``source`` to ``target`` (``live`` or ``cold``); the outcome."""
        from openstack import exceptions

        try:
            if kind == "live":
                self.compute.live_migrate_server(instance_uuid, host=target, force=False,
                                                 block_migration="auto")
            else:
                self.compute.migrate_server(instance_uuid, host=target)
        except (exceptions.SDKException, ValueError) as exc:
            return Outcome("failed", f"Nova refused the move: {_message(exc)}")
        return self._follow(instance_uuid, source, target, kind)

    def _follow(self, instance_uuid: str, source: str, target: str, kind: str) -> Outcome:
        """Read the server until the move is done, failed or out of time."""
        from openstack import exceptions

        deadline = self.clock() + self.timeout
        while True:
            try:
                server = self.compute.get_server(instance_uuid)
            except exceptions.SDKException as exc:
                LOG.warning("descheduler: reading %s failed: %s", instance_uuid, _message(exc))
                server = None
            if server is not None:
                host, status, task = server.compute_host, server.status, server.task_state
                if status == "ERROR":
                    return Outcome("failed", f"the instance went to ERROR on {host}")
                if kind == "cold" and status == "VERIFY_RESIZE" and host == target:
                    try:
                        self.compute.confirm_server_resize(instance_uuid)
                    except exceptions.SDKException as exc:
                        return Outcome("failed", f"confirming the move failed: {_message(exc)}")
                    return Outcome("completed", f"cold-migrated to {target} and confirmed")
                if status == "ACTIVE" and not task and host == target and kind == "live":
                    return Outcome("completed", f"live-migrated to {target}")
                if status == "ACTIVE" and not task and host == source:
                    return Outcome("failed", f"Nova left the instance on {source}")
            if self.clock() >= deadline:
                return Outcome("timed_out", f"not done after {self.timeout:g} s")
            self.sleep(self.poll_interval)


def _message(exc: Exception) -> str:
    """One line of an SDK error: Nova's own message where it sent one."""
    details = getattr(exc, "details", None)
    return " ".join(str(details or exc).split())[:300]
