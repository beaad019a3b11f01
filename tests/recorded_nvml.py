"""Replays of real GPU machines: what their NVML and sysfs answered the agent.

``tests/fixtures/topology/recorded/capture.py`` runs the agent on a real machine and
records every NVML call with its answer and every sysfs read. Here ``ReplayNvml``
answers the same calls the same way and ``write_recorded_tree`` writes the sysfs the
agent read, so the agent can run again, anywhere, on what the real machine said.
"""

from __future__ import annotations

import ctypes
import json
import os
from collections import defaultdict, deque
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import pynvml

from cortex.agent.report import build_report

RECORDED = Path(__file__).parent / "fixtures" / "topology" / "recorded"


def recorded_machines() -> list[str]:
    """The machines recorded under ``tests/fixtures/topology/recorded``."""
    return sorted(p.parent.name for p in RECORDED.glob("*/nvml-calls.json"))


def load_recording(name: str) -> dict:
    """``{"report", "calls", "reads"}`` of a recorded machine (the capture's three JSONs)."""
    folder = RECORDED / name
    return {"report": json.loads((folder / "report.json").read_text()),
            "calls": json.loads((folder / "nvml-calls.json").read_text()),
            "reads": json.loads((folder / "sysfs-reads.json").read_text())}


class RecordedNvmlError(pynvml.NVMLError):
    """An NVML error as the machine's library raised it: its code and its message."""

    def __new__(cls, value: int, message: str):
        """The error (pynvml's errors are built in ``__new__``)."""
        error = Exception.__new__(cls)
        error.value = value
        error.message = message
        return error

    def __init__(self, value: int, message: str) -> None:
        super().__init__(value)

    def __str__(self) -> str:
        return self.message


class ReplayNvml:
    """pynvml answering each call as the recorded machine did (same name, same arguments).

    A function the machine was never asked is absent (the agent then reports the field
    as missing from this nvidia-ml-py); a recorded function asked with arguments the
    machine never saw fails the test: record again on such a machine. Structures the
    machine filled through a pointer (``nvmlDeviceGetGpuFabricInfo``) are filled the same.
    """

    NVMLError = pynvml.NVMLError

    def __init__(self, calls: list[dict]) -> None:
        self.answers: dict[tuple[str, str], deque] = defaultdict(deque)
        for entry in calls:
            self.answers[entry["call"], _key(entry["args"])].append(entry)
        self.names = {entry["call"] for entry in calls}
        self.asked: list[str] = []

    def __getattr__(self, name: str):
        if name.startswith(("NVML_", "c_nvml")):
            return getattr(pynvml, name)
        if name not in self.names:
            raise AttributeError(name)

        def call(*args):
            key = _key([_live(a) for a in args])
            queue = self.answers.get((name, key))
            assert queue, f"{name}{key} was never asked of the recorded machine"
            entry = queue.popleft() if len(queue) > 1 else queue[0]
            self.asked.append(name)
            if "error" in entry:
                raise RecordedNvmlError(entry["error"]["value"], entry["error"]["message"])
            for live, after in zip(args, entry.get("args_after", ()), strict=False):
                if isinstance(after, dict) and "pointer" in after:
                    _fill(live.contents, after["pointer"])
            return _decode(entry["result"])

        return call


class _Handle:
    """A GPU handle of a replay, named as the recording names it (``gpu0``)."""

    def __init__(self, name: str) -> None:
        self.name = name


def _live(value):
    """The recorded form of an argument the agent passes (buffers and pointers: ``*``)."""
    if isinstance(value, _Handle):
        return {"handle": value.name}
    if isinstance(value, list | tuple):
        return [_live(v) for v in value]
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    return "*"


def _key(args: list) -> str:
    """Arguments as a lookup key: buffers, pointers and structures all read ``*``."""
    return json.dumps([a if not isinstance(a, dict) or "handle" in a else "*" for a in args])


def _decode(value):
    """A recorded answer as pynvml gives it: structures as attribute objects, bytes as bytes."""
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "handle" in value:
        return _Handle(value["handle"])
    if "bytes" in value:
        return value["bytes"].encode()
    if "struct" in value:
        return SimpleNamespace(**{k: _decode(v) for k, v in value["fields"].items()})
    raise AssertionError(f"cannot replay {value}")


def _fill(structure, recorded: dict) -> None:
    """Set a ctypes structure's fields to the recorded ones (arrays element by element)."""
    for field, value in recorded["fields"].items():
        current = getattr(structure, field)
        if isinstance(value, dict) and "struct" in value:
            _fill(current, value)
        elif isinstance(value, dict) and "bytes" in value:
            setattr(structure, field, value["bytes"].encode())
        elif isinstance(current, ctypes.Array):
            for index, item in enumerate(value[:len(current)]):  # versions differ in size
                current[index] = item
        else:
            setattr(structure, field, value)


def write_recorded_tree(root: Path, reads: dict) -> Path:
    """Write under ``root`` the sysfs the recording read: files, links, directories.

    Files hold the text read; links point to a target of the recorded name; every listed
    entry exists (a directory unless it was read as a file); a path whose real path was
    elsewhere (``sys/class/net/eth0/device``) becomes a link to that path under
    ``root/targets``, so only the recorded machine's names are seen, never this one's.
    ``root/proc`` holds the procfs files the recording read (``cpuinfo``, ...); a
    recording without them leaves it empty (the agent then reports no ``cpu_info``).
    """
    for relative, text in reads["reads"].items():
        if text is not None:
            _make(root / relative).write_text(text + "\n")
    for relative, name in reads["links"].items():
        if name is not None:
            os.symlink(root / "targets" / name, _make(root / relative))
    for relative, names in reads["dirs"].items():
        (root / relative).mkdir(parents=True, exist_ok=True)
        for name in names:
            if not os.path.lexists(root / relative / name):
                (root / relative / name).mkdir()
    known = set(reads["reads"]) | set(reads["links"]) | set(reads["dirs"])
    for relative, seen in reads["paths"].items():
        if relative in known or not seen["exists"] or os.path.lexists(root / relative):
            continue
        if seen["realpath"] != "/" + relative:
            os.symlink(root / "targets" / seen["realpath"].lstrip("/"), _make(root / relative))
        else:
            (root / relative).mkdir(parents=True)
    (root / "proc").mkdir(exist_ok=True)
    for relative, text in reads.get("proc", {}).items():
        if text is not None:
            _make(root / "proc" / relative).write_text(text + "\n")
    return root


def _make(path: Path) -> Path:
    """``path``, its parent directories made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def replay_report(name: str, root: Path, recording: dict | None = None
                  ) -> tuple[dict, ReplayNvml]:
    """The agent's report on a recorded machine replayed under ``root``, and the replay.

    ``recording``: the machine's recording (default: :func:`load_recording`), edited or not.
    """
    recording = recording or load_recording(name)
    write_recorded_tree(root, recording["reads"])
    nvml = ReplayNvml(recording["calls"])
    recorded = recording["report"]
    when = datetime.fromisoformat(recorded["collected_at"].replace("Z", "+00:00"))
    report = build_report(recorded["host"], nvml=nvml, sysfs_root=root, proc_root=root / "proc",
                          nova_config=None, now=when)
    return report, nvml
