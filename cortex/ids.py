"""Identifiers for requests and decisions."""

from __future__ import annotations

import os
import random
import uuid

_generator = random.Random(random.SystemRandom().getrandbits(64))


def _reseed() -> None:
    """Seed a forked process's ids afresh.

    gunicorn's workers fork from a master that imported this module: with the master's
    seed every worker would draw the same ids (reservations, decisions, requests).
    """
    _generator.seed(random.SystemRandom().getrandbits(64))


os.register_at_fork(after_in_child=_reseed)


def new_uuid() -> str:
    """A random (version 4) UUID string.

    Seeded once per process from the OS, then drawn from a fast PRNG: these ids name
    requests and decisions, they guard nothing, and ``uuid.uuid4()`` reads
    ``os.urandom``, which costs about a millisecond per call on some virtual machines.
    """
    return str(uuid.UUID(int=_generator.getrandbits(128), version=4))
