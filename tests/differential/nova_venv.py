"""The cached virtualenv holding upstream Nova (PyPI ``nova``) for the differential suite.

Built once under ``$CORTEX_TEST_CACHE`` (default ``~/.cache/cortex-test``) as
``nova-venv-<version>``, under a file lock and marked complete (``.complete``) only at
the end, as ``tests/real_servers.py placement_venv`` does. Nova's code runs only in that
interpreter (``tests/differential/nova_side.py``), never in Cortex's. Imports nothing of
Cortex, so ``tests/real_servers.py prepare`` can call :func:`nova_venv` before Cortex is
installed.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

NOVA_VERSION = os.environ.get("CORTEX_TEST_NOVA_VERSION", "34.0.0")
CACHE = Path(os.environ.get("CORTEX_TEST_CACHE", Path.home() / ".cache" / "cortex-test"))


class NovaUnavailable(RuntimeError):
    """The Nova virtualenv could not be built; the message says why (a test failure)."""


def nova_venv(version: str = NOVA_VERSION) -> Path:
    """The cached virtualenv with ``nova==version``; built on first use (a few minutes).

    Returns the virtualenv's root (its interpreter is ``<root>/bin/python``). Raises
    NovaUnavailable when the build fails (no PyPI, no compiler for a dependency).
    Concurrent callers wait on the lock; a half-built virtualenv is rebuilt.
    """
    target = CACHE / f"nova-venv-{version}"
    complete = target / ".complete"
    if complete.exists():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"nova-venv-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if complete.exists():
            return target
        shutil.rmtree(target, ignore_errors=True)
        try:
            subprocess.run([sys.executable, "-m", "venv", str(target)], check=True)
            subprocess.run([str(target / "bin" / "pip"), "install", "-q",
                            f"nova=={version}"], check=True)
            subprocess.run([str(target / "bin" / "python"), "-c",
                            "import nova.scheduler.filters.numa_topology_filter"], check=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            raise NovaUnavailable(f"cannot build the Nova virtualenv: {exc}") from None
        complete.write_text(version)
    return target


if __name__ == "__main__":
    print(nova_venv())
