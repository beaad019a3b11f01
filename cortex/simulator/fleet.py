"""Simulated fleets: our fleet files (host groups of boards) and Alibaba's GPU node list.

Fleet file (``etc/cortex/simulator/fleet-*.yaml``)::

    boards: boards.yaml | {name: board}       # a file next to the fleet file, or inline
    hosts: [{prefix, count, board, availability_zone?}]
    network: leafspine-topology.yaml          # optional: the fabric, a topology file

Hosts are named ``<prefix>-<nnn>``. Alibaba's ``openb_node_list_gpu_node.csv`` (columns
``sn, cpu_milli, memory_mib, gpu, model``) becomes boards by the rules of
``etc/cortex/simulator/alibaba-models.yaml``. Bad input raises SimulationError.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cortex.documents import load_document
from cortex.knowledge.network import NetworkTopologyError, read_topology_file
from cortex.simulator.boards import NVLINK_KINDS, mig_layouts


class SimulationError(ValueError):
    """A fleet, trace or option the simulator cannot use; the message says which and why."""


_INT = {"type": "integer", "minimum": 1}

#: How a board with ``vgpu_slots`` shares its GPUs. ``vgpu``: every GPU is a time-sliced
#: vGPU parent (Nova's vGPU host: ``[devices] enabled_mdev_types`` on every GPU). ``any``:
#: each GPU is passed through whole or shared by vGPUs, whichever comes first, and is
#: free for either again once its last guest left: Weng et al.'s setting (any GPU may be
#: shared), which Nova cannot run today, since nova-compute binds a GPU to vfio-pci or
#: to the vGPU manager by its configuration, not per guest.
GPU_SHARING = ("vgpu", "any")
#: The Alibaba model rules' ``gpu_sharing``: ``vgpu-hosts`` makes ``vgpu_share`` of the
#: nodes vGPU hosts and the rest passthrough hosts; ``any`` lets every GPU of every node
#: be shared (boards with ``gpu_sharing: any``).
ALIBABA_SHARING = ("vgpu-hosts", "any")

BOARD_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False,
    "required": ["sockets", "cores_per_socket", "memory_mb_per_node", "gpu"],
    "properties": {
        "description": {"type": "string"}, "sockets": _INT, "nodes_per_socket": _INT,
        "cores_per_socket": _INT, "threads_per_core": _INT, "memory_mb_per_node": _INT,
        "dedicated_cpus": {"type": "string"}, "shared_cpus": {"type": "string"},
        "cpu_allocation_ratio": {"type": "number", "exclusiveMinimum": 0},
        "gpu": {"type": "object", "required": ["product_id"], "additionalProperties": False,
                "properties": {"product_id": {"type": "string"}, "vendor_id": {"type": "string"},
                               "name": {"type": "string"}, "memory_mb": _INT,
                               "idle_watts": {"type": "number", "minimum": 0},
                               "busy_watts": {"type": "number", "minimum": 0}}},
        "gpu_count": {"type": "integer", "minimum": 0},
        "gpus": {"type": "array", "items": {
            "type": "object", "required": ["pci", "node", "pcie"], "additionalProperties": False,
            "properties": {"pci": {"type": "string"}, "node": {"type": "integer", "minimum": 0},
                           "pcie": {"type": "array", "minItems": 1,
                                    "items": {"type": "string"}}}}},
        "nvlink": {"type": "object", "additionalProperties": False, "required": ["kind"],
                   "properties": {"kind": {"enum": list(NVLINK_KINDS)}, "links": _INT,
                                  "pairs": {"type": "array", "items": {
                                      "type": "array", "minItems": 2, "maxItems": 2,
                                      "items": {"type": "integer", "minimum": 0}}}}},
        "vgpu_slots": _INT,
        "gpu_sharing": {"enum": list(GPU_SHARING)},
        # MIG-backed vGPU host: per GPU the MIG profiles the operator created (cycled)
        "mig": {"type": "object", "required": ["layouts"], "additionalProperties": False,
                "properties": {"layouts": {"type": "array", "minItems": 1, "items": {
                    "type": "array", "minItems": 1, "items": {"type": "string"}}}}},
    },
}
FLEET_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["boards", "hosts"],
    "properties": {
        "description": {"type": "string"},
        "network": {"type": "string", "minLength": 1},
        "boards": {"oneOf": [{"type": "string"}, {"type": "object",
                                                  "additionalProperties": BOARD_SCHEMA}]},
        "hosts": {"type": "array", "minItems": 1, "items": {
            "type": "object", "additionalProperties": False,
            "required": ["prefix", "count", "board"],
            "properties": {"prefix": {"type": "string", "minLength": 1}, "count": _INT,
                           "board": {"type": "string"},
                           "availability_zone": {"type": ["string", "null"]}}}},
    },
}
BOARDS_FILE_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["boards"],
    "properties": {"boards": {"type": "object", "additionalProperties": BOARD_SCHEMA}},
}
MODELS_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["models", "vgpu_slots", "vgpu_share"],
    "properties": {
        "vgpu_slots": _INT, "vgpu_share": {"type": "number", "minimum": 0, "maximum": 1},
        "gpu_sharing": {"enum": list(ALIBABA_SHARING)},
        "models": {"type": "object", "additionalProperties": {
            "type": "object", "required": ["product_id"], "additionalProperties": False,
            "properties": {"product_id": {"type": "string"},
                           "idle_watts": {"type": "number"}, "busy_watts": {"type": "number"},
                           "nvlink": {"type": "object", "additionalProperties": {
                               "enum": list(NVLINK_KINDS)}}}}}},
}
_NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")


@dataclass(frozen=True)
class HostSpec:
    """One simulated compute host: its name, availability zone and board."""

    name: str
    availability_zone: str | None
    board: Mapping[str, Any]
    board_name: str


@dataclass(frozen=True)
class Fleet:
    """A named list of hosts (``name`` is the file's stem) and where it came from.

    ``network``: the fleet's leaf/spine topology (a parse_topology document), if any.
    """

    name: str
    hosts: tuple[HostSpec, ...]
    source: str
    network: Mapping[str, Any] | None = None

    @property
    def gpus(self) -> int:
        """GPUs in the fleet (passthrough and vGPU hosts)."""
        return sum(len(h.board.get("gpus") or ()) or h.board.get("gpu_count", 0)
                   for h in self.hosts)


def read_fleet(path: str | Path, sample_nodes: int = 1,
               models: str | Path | None = None, sample_offset: int = 0,
               overrides: Mapping[str, Any] | None = None) -> Fleet:
    """The fleet of a fleet file or of Alibaba's node CSV (every ``sample_nodes``-th node).

    ``models`` and ``overrides`` (:func:`alibaba_models`) apply to Alibaba's nodes.
    """
    path = Path(path)
    if path.suffix == ".csv":
        return alibaba_fleet(path, sample_nodes, models, sample_offset, overrides)
    data = load_document(path, FLEET_SCHEMA, SimulationError)
    boards = data["boards"]
    if isinstance(boards, str):
        boards = load_document(path.parent / boards, BOARDS_FILE_SCHEMA,
                               SimulationError)["boards"]
    for name, board in boards.items():
        check_board(board, f"{path}: board {name}")
    hosts = []
    for group in data["hosts"]:
        board = boards.get(group["board"])
        if board is None:
            raise SimulationError(f"{path}: unknown board {group['board']!r}")
        hosts += [HostSpec(f"{group['prefix']}-{i:03d}", group.get("availability_zone"), board,
                           group["board"]) for i in range(group["count"])]
    names = [h.name for h in hosts]
    if len(set(names)) != len(names):
        raise SimulationError(f"{path}: host names repeat; give each group its own prefix")
    network = None
    if data.get("network"):
        try:
            network = read_topology_file(path.parent / data["network"])
        except NetworkTopologyError as exc:
            raise SimulationError(str(exc)) from None
    return Fleet(path.stem, tuple(hosts), str(path), network)


def check_board(board: Mapping[str, Any], where: str) -> None:
    """SimulationError (prefixed ``where``) for a board the schema lets pass but Nova cannot run.

    A MIG board's layouts must fit the GPU (:func:`cortex.simulator.boards.mig_layouts`),
    and a GPU is either time-sliced (``vgpu_slots``) or MIG-backed, not both.
    """
    if not board.get("mig"):
        return
    if board.get("vgpu_slots"):
        raise SimulationError(f"{where}: give vgpu_slots (time-sliced vGPUs) or mig "
                              "(MIG-backed vGPUs), not both")
    try:
        mig_layouts(board)
    except ValueError as exc:
        raise SimulationError(f"{where}: {exc}") from None


def alibaba_models(path: str | Path | None = None,
                   overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The model rules (``alibaba-models.yaml``), validated, with ``overrides`` laid over.

    ``overrides``: rule values that replace the file's (``vgpu_slots``, ``gpu_sharing``;
    None values are left out). SimulationError for a file or a value that is invalid.
    """
    if path is None:
        from cortex.conf import shipped_file

        path = shipped_file("simulator/alibaba-models.yaml")
    rules = load_document(path, MODELS_SCHEMA, SimulationError)
    rules.update({k: v for k, v in (overrides or {}).items() if v is not None})
    if rules.get("gpu_sharing", "vgpu-hosts") not in ALIBABA_SHARING:
        raise SimulationError(f"gpu_sharing must be one of {', '.join(ALIBABA_SHARING)}, "
                              f"not {rules['gpu_sharing']!r}")
    if not isinstance(rules["vgpu_slots"], int) or rules["vgpu_slots"] < 1:
        raise SimulationError(f"vgpu_slots must be a whole number >= 1, not "
                              f"{rules['vgpu_slots']!r}")
    return rules


def alibaba_board(cpus: int, memory_mb: int, gpus: int, model: Mapping[str, Any],
                  vgpu_slots: int | None = None, sharing: str = "vgpu") -> dict[str, Any]:
    """A board for one Alibaba node, by the rules stated in ``alibaba-models.yaml``."""
    sockets = 2 if gpus >= 2 and cpus >= 16 else 1
    nvlink = (model.get("nvlink") or {}).get(str(gpus), "none")
    board: dict[str, Any] = {
        "sockets": sockets, "nodes_per_socket": 1, "threads_per_core": 2,
        "cores_per_socket": max(1, cpus // (2 * sockets)),
        "memory_mb_per_node": max(1, memory_mb // sockets),
        "gpu": {"product_id": model["product_id"], "idle_watts": model.get("idle_watts", 50),
                "busy_watts": model.get("busy_watts", 300)},
        "gpu_count": gpus, "nvlink": {"kind": nvlink}}
    if vgpu_slots:
        board["vgpu_slots"] = vgpu_slots
        if sharing != "vgpu":
            board["gpu_sharing"] = sharing
    return board


def alibaba_fleet(path: Path, sample_nodes: int = 1, models: str | Path | None = None,
                  sample_offset: int = 0, overrides: Mapping[str, Any] | None = None) -> Fleet:
    """Alibaba's GPU nodes as a fleet: every ``sample_nodes``-th node of each kind of node.

    A kind is (model, GPUs, CPUs, memory); sampling keeps the fleet's mix, starting at the
    ``sample_offset``-th node of a kind (each kind keeps at least one node).
    ``vgpu_share`` of each kind's kept nodes become vGPU hosts; with ``gpu_sharing: any``
    every node's GPUs may be shared instead (:data:`ALIBABA_SHARING`). ``overrides``:
    see :func:`alibaba_models`.
    """
    rules = alibaba_models(models, overrides)
    shared = rules.get("gpu_sharing", "vgpu-hosts") == "any"
    rows = _csv_rows(path, _NODE_COLUMNS)
    groups: dict[tuple, list[dict[str, str]]] = {}
    for row in rows:
        if int(row["gpu"] or 0) > 0:
            key = (row["model"], row["gpu"], row["cpu_milli"], row["memory_mib"])
            groups.setdefault(key, []).append(row)
    share = rules["vgpu_share"]
    hosts = []
    for (model_name, gpus, cpu_milli, memory), members in groups.items():
        model = rules["models"].get(model_name)
        if model is None:
            raise SimulationError(f"{path}: GPU model {model_name!r} is not in the model rules")
        step = max(1, sample_nodes)
        kept = members[sample_offset % step::step] or members[:1]
        for i, row in enumerate(kept):
            vgpu = shared or int((i + 1) * share) > int(i * share)
            board = alibaba_board(int(cpu_milli) // 1000, int(memory), int(gpus), model,
                                  rules["vgpu_slots"] if vgpu else None,
                                  "any" if shared else "vgpu")
            hosts.append(HostSpec(row["sn"], None, board, f"{model_name}x{gpus}"
                                  + (" shared" if shared else " vGPU" if vgpu else "")))
    return Fleet(path.stem, tuple(sorted(hosts, key=lambda h: h.name)), str(path))


def _csv_rows(path: Path, columns: tuple[str, ...]) -> list[dict[str, str]]:
    """The rows of a CSV file that has at least ``columns``; SimulationError otherwise."""
    try:
        with path.open(newline="") as handle:
            reader = csv.DictReader(handle)
            missing = [c for c in columns if c not in (reader.fieldnames or ())]
            if missing:
                raise SimulationError(f"{path}: missing column(s) {', '.join(missing)}")
            return list(reader)
    except OSError as exc:
        raise SimulationError(f"{path}: {exc}") from None
