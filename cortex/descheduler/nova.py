"""Ask Nova to move an instance and follow the move to its end, through openstacksdk.

A live move is ``os-migrateLive`` with the target host, not forced (microversion 2.30
and later: Nova's scheduler, and so Cortex, checks the target again) and block
migration ``auto``; a cold move is ``migrate`` with the target host (2.56 and later),
then ``confirmResize`` once Nova reports ``VERIFY_RESIZE`` on the target. The move is
followed by reading the server every ``poll_interval`` seconds:

- done: the server is settled (no task, no status of :data:`MOVING_STATUSES`) on the
  target (live; cold when Nova confirmed the resize itself), or ``VERIFY_RESIZE`` there
  and confirmed (cold);
- failed: ``ERROR``, or settled on another host than the target: on the source, Nova
  rolled the move back (the migration's own record says why, which Nova's server
  does not);
- timed out: neither within ``timeout`` seconds.

Nova's API sets the server's task state before it answers 202 to either action
(``nova/compute/api.py``: ``resize`` and ``live_migrate``), so a server read after the
answer is never mistaken for one that did not start moving.

A move of an earlier pass (its process killed, or out of time) is looked at once
(:meth:`NovaMover.look`): the same reading of the server, its newest migration record
(``os-migrations``) for the detail, and ``running`` while Nova still moves it.

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


#: Server statuses of a move under way: Nova's ``vm_states``/``task_states`` as its API
#: shows them (``nova/api/openstack/common.py``, ``_STATE_MAP``).
MOVING_STATUSES = ("MIGRATING", "RESIZE", "VERIFY_RESIZE", "REVERT_RESIZE")


@dataclass(frozen=True)
class Outcome:
    """Where a move stands: ``state`` and ``detail`` (one line).

    ``state``: completed, failed or timed_out from :meth:`NovaMover.move`; completed,
    failed, ``running`` (Nova still moves it) or ``unknown`` (Nova could not be asked)
    from :meth:`NovaMover.look`.
    """

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
        return self._follow(instance_uuid, target, kind)

    def look(self, instance_uuid: str, target: str, kind: str) -> Outcome:
        """Where an earlier move of the instance stands, from one read of Nova.

        A cold move Nova finished is confirmed here, as :meth:`move` would have.
        ``running``: Nova still moves it; ``failed`` also when Nova no longer knows
        the instance (404); ``unknown`` when Nova cannot be asked (an error of its API
        or of the connection). ``detail`` ends with what Nova answered before anything
        was done: the server's status, task state and host, and its newest migration.
        """
        from keystoneauth1.exceptions import ClientException
        from openstack import exceptions

        try:
            server = self.compute.get_server(instance_uuid)
        except exceptions.NotFoundException:
            return Outcome("failed", "Nova no longer knows the instance (404)")
        except (exceptions.SDKException, ClientException) as exc:
            return Outcome("unknown", f"Nova could not be asked: {_message(exc)}")
        answer = (f"Nova: {server.status}, task {server.task_state or 'none'}, on "
                  f"{server.compute_host}; {self._migration(instance_uuid)}")
        ended = self._judge(server, target, kind)
        if ended is None:
            return Outcome("running", f"Nova still moves it ({answer})")
        return Outcome(ended.state, f"{ended.detail} ({answer})")

    def _migration(self, instance_uuid: str) -> str:
        """The instance's newest migration record in a few words (``os-migrations``)."""
        from keystoneauth1.exceptions import ClientException
        from openstack import exceptions

        try:
            found = [m for m in self.compute.migrations(server_id=instance_uuid)
                     if m.server_id == instance_uuid]
        except (exceptions.SDKException, ClientException) as exc:
            return f"its migrations could not be read: {_message(exc)}"
        if not found:
            return "no migration record"
        newest = max(found, key=lambda m: m.created_at or "")
        return f"migration {newest.source_compute} -> {newest.dest_compute} {newest.status}"

    def _follow(self, instance_uuid: str, target: str, kind: str) -> Outcome:
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
                ended = self._judge(server, target, kind)
                if ended is not None:
                    return ended
            if self.clock() >= deadline:
                return Outcome("timed_out", f"not done after {self.timeout:g} s")
            self.sleep(self.poll_interval)

    def _judge(self, server: Any, target: str, kind: str) -> Outcome | None:
        """The move's end as ``server`` (openstacksdk's Server) shows it; None while under way.

        A cold move in ``VERIFY_RESIZE`` on the target is confirmed here.
        """
        from openstack import exceptions

        host, status, task = server.compute_host, server.status, server.task_state
        if status == "ERROR":
            return Outcome("failed", f"the instance went to ERROR on {host}")
        if kind == "cold" and status == "VERIFY_RESIZE" and host == target:
            try:
                self.compute.confirm_server_resize(server.id)
            except exceptions.SDKException as exc:
                return Outcome("failed", f"confirming the move failed: {_message(exc)}")
            return Outcome("completed", f"cold-migrated to {target} and confirmed")
        if task or status in MOVING_STATUSES:
            return None
        if host == target:
            return Outcome("completed", f"{kind}-migrated to {target}")
        return Outcome("failed", f"Nova left the instance on {host}")


def _message(exc: Exception) -> str:
    """One line of an SDK error: Nova's own message where it sent one."""
    details = getattr(exc, "details", None)
    return " ".join(str(details or exc).split())[:300]
