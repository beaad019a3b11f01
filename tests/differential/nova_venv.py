"""The cached virtualenv holding upstream Nova (PyPI ``nova``) for the differential suite.

Built once under ``$CORTEX_TEST_CACHE`` (default ``~/.cache/cortex-test``) as
``nova-venv-<version>`` by ``tests/real_servers.py``'s :func:`cached_venv`, as the
Placement virtualenv is. Nova's code runs only in that
interpreter (``tests/differential/nova_side.py``), never in Cortex's. Imports nothing of
Cortex, so ``tests/real_servers.py prepare`` can call :func:`nova_venv` before Cortex is
installed.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.real_servers import ServerUnavailable, cached_venv

NOVA_VERSION = os.environ.get("CORTEX_TEST_NOVA_VERSION", "34.0.0")


class NovaUnavailable(ServerUnavailable):
    """The Nova virtualenv could not be built; the message says why (a test failure)."""


def nova_venv(version: str = NOVA_VERSION) -> Path:
    """The cached virtualenv with ``nova==version``; built on first use (a few minutes).

    Returns the virtualenv's root (its interpreter is ``<root>/bin/python``). Raises
    NovaUnavailable when the build fails (no PyPI, no compiler for a dependency).
    Concurrent callers wait on the lock; a half-built virtualenv is rebuilt.
    """
    try:
        return cached_venv(f"nova-venv-{version}", f"nova=={version}",
                           check="import nova.scheduler.filters.numa_topology_filter")
    except ServerUnavailable as exc:
        raise NovaUnavailable(str(exc)) from None
