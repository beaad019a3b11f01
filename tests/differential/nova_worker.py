"""``nova_side.py --serve`` as a long-lived worker: Nova's verdicts, one request a line."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.differential.nova_venv import NovaUnavailable, nova_venv

HERE = Path(__file__).parent


class NovaWorker:
    """The Nova side serving: first its fleet (``fleet``), then one answer per request.

    ``hosts`` generated hosts from ``seed``, then one host per agent report in
    ``reports`` (files recorded on real machines, named by their ``host``). Fails the
    test when the Nova virtualenv cannot be built or the worker dies.
    """

    def __init__(self, seed: int, hosts: int, reports: Sequence[Path] = ()) -> None:
        try:
            python = nova_venv() / "bin" / "python"
        except NovaUnavailable as exc:
            pytest.fail(str(exc))
        command = [str(python), str(HERE / "nova_side.py"), "--serve", "--seed", str(seed),
                   "--hosts", str(hosts)]
        if reports:
            command += ["--reports", *map(str, reports)]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True)
        self.fleet = json.loads(self._line())

    def _line(self) -> str:
        line = self.process.stdout.readline()
        if not line:
            pytest.fail(f"nova_side.py --serve ended (exit {self.process.poll()})")
        return line

    def judge(self, ask: dict) -> dict:
        """The worker's line for ``ask`` (``{"kind": "invalid"}`` when Nova refuses it)."""
        self.process.stdin.write(json.dumps(ask) + "\n")
        self.process.stdin.flush()
        return json.loads(self._line())

    def close(self) -> None:
        """End the worker (its stdin closed, it exits)."""
        self.process.stdin.close()
        self.process.wait(timeout=30)
