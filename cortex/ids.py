"""Identifiers for requests and decisions."""

from __future__ import annotations

import random
import uuid

_random = random.SystemRandom().getrandbits(64)
_generator = random.Random(_random)


def new_uuid() -> str:
    """A random (version 4) UUID string.

    Seeded once per process from the OS, then drawn from a fast PRNG: these ids name
    requests and decisions, they guard nothing, and ``uuid.uuid4()`` reads
    ``os.urandom``, which costs about a millisecond per call on some virtual machines.
    """
    return str(uuid.UUID(int=_generator.getrandbits(128), version=4))
