"""Waiting in tests for what another thread or process does, and a clock a test moves.

A test waits for the condition it is about to assert, never for a guess of how long
that takes (``time.sleep(0.5)`` then an assertion fails on a busy machine, or passes
before anything happened). The deadline is only there so that a broken test ends
instead of hanging; it is generous, so that a loaded machine is not taken for a
broken one. Where the passing of time is itself what a test checks (an expiry, an
age limit, a budget), the code takes a clock and the test moves a :class:`ManualClock`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

#: Seconds a test waits for a condition before it fails: long enough for any machine.
DEADLINE = 30.0

T = TypeVar("T")


def eventually(predicate: Callable[[], object], timeout: float = DEADLINE,
               interval: float = 0.02) -> bool:
    """Whether ``predicate()`` became true within ``timeout`` seconds (polled)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def wait_until(predicate: Callable[[], T], timeout: float = DEADLINE, interval: float = 0.1,
               what: str = "the condition") -> T:
    """``predicate()``'s first true value; AssertionError when none came in ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not true within {timeout:g} s")
        time.sleep(interval)


class ManualClock:
    """A monotonic clock that stands still until the test moves it (``clock.advance(s)``)."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
