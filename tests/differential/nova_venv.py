"""The cached virtualenvs holding upstream Nova (PyPI ``nova``) for the tests.

Built once under ``$CORTEX_TEST_CACHE`` (default ``~/.cache/cortex-test``) by
``tests/real_servers.py``'s :func:`cached_venv`, as the Placement virtualenv is:

- ``nova-venv-<version>`` (:func:`nova_venv`): Nova alone, for the differential suite
  (``tests/differential/nova_side.py``);
- ``nova-functional-venv-<version>`` (:func:`nova_functional_venv`): Nova with what its
  functional harness (``nova/tests/functional``, shipped in the wheel) needs to run, for
  the Nova-in-the-loop tests (``tests/nova_loop/nova_driver.py``).

Nova's code runs only in those interpreters, never in Cortex's. Imports nothing of
Cortex, so ``tests/real_servers.py prepare`` can call both before Cortex is installed.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.real_servers import PLACEMENT_VERSION, ServerUnavailable, cached_venv

NOVA_VERSION = os.environ.get("CORTEX_TEST_NOVA_VERSION", "34.0.0")

#: What Nova's functional harness imports beyond Nova (its test-requirements): the
#: Placement package for PlacementFixture, oslotest and testtools for its TestCase,
#: wsgi-intercept for the in-process API. SQLAlchemy stays below 2.1, as Nova 34's
#: constraints hold it: the harness turns SQLAlchemy's deprecation warnings into errors,
#: and 2.1 deprecates the ``noload()`` Nova's instance listing uses.
FUNCTIONAL_REQUIREMENTS = ("oslotest==6.1.1", "testtools==2.9.1", "wsgi-intercept==1.13.1",
                           "SQLAlchemy>=2.0,<2.1")


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


def nova_functional_venv(version: str = NOVA_VERSION) -> Path:
    """The cached virtualenv with ``nova==version`` and its functional harness's needs.

    Placement ``openstack-placement`` at :data:`PLACEMENT_VERSION` (the version the sync
    tests run) and :data:`FUNCTIONAL_REQUIREMENTS`; built on first use (one to two
    minutes with a warm pip cache). Raises NovaUnavailable when the build fails.
    """
    try:
        return cached_venv(
            f"nova-functional-venv-{version}",
            (f"nova=={version}", f"openstack-placement=={PLACEMENT_VERSION}",
             *FUNCTIONAL_REQUIREMENTS),
            check="import nova.tests.functional.libvirt.base, nova.tests.functional.fixtures")
    except ServerUnavailable as exc:
        raise NovaUnavailable(str(exc)) from None


def side_lines(script: str, **options: int) -> list[dict]:
    """The JSON lines a Nova-side ``script`` (beside this file) prints; fails the test if it fails.

    ``options`` become ``--name value`` arguments (``seed=1`` -> ``--seed 1``).
    """
    import pytest  # imported here: prepare runs this module before pytest is installed

    try:
        python = nova_venv() / "bin" / "python"
    except NovaUnavailable as exc:
        pytest.fail(str(exc))
    here = Path(__file__).parent
    arguments = [str(x) for name, value in options.items() for x in (f"--{name}", value)]
    done = subprocess.run([str(python), str(here / script), *arguments],
                          capture_output=True, text=True, check=False, cwd=here)
    if done.returncode:
        pytest.fail(f"{script} failed: {done.stderr[-3000:]}")
    return [json.loads(line) for line in done.stdout.splitlines()]
