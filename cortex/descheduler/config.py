"""The descheduler's configuration: its detectors (YAML) and its limits (cortex.conf).

The detectors file (``[descheduler] detectors_file``, default the shipped
``etc/cortex/descheduler.yaml``) lists ``detectors: [{name, options?}]`` in the order
they run; a name unknown to the registry, an option its dataclass does not take or a
malformed file is a ConfigError at load, before anything runs.
"""

from __future__ import annotations

from typing import Any

from cortex import conf as config
from cortex.documents import load_document
from cortex.plugins.base import Detector, OptionsError, build_options
from cortex.plugins.registry import PluginError, load_all, lookup
from cortex.scheduler.deschedule import Limits

_SCHEMA = {
    "type": "object", "required": ["detectors"], "additionalProperties": False,
    "properties": {"detectors": {"type": "array", "minItems": 1, "items": {
        "type": "object", "required": ["name"], "additionalProperties": False,
        "properties": {"name": {"type": "string", "minLength": 1},
                       "options": {"type": ["object", "null"]}}}}},
}


def load_detectors(conf: config.Config) -> list[Detector]:
    """The configured detectors, in order; ConfigError for a bad file, name or option."""
    path = conf.get("descheduler", "detectors_file") or config.shipped_file("descheduler.yaml")
    document: Any = load_document(path, _SCHEMA, config.ConfigError)
    load_all()
    detectors = []
    for index, entry in enumerate(document["detectors"]):
        try:
            cls = lookup("detector", entry["name"])
            detectors.append(cls(build_options(cls, entry.get("options"))))
        except (PluginError, OptionsError) as exc:
            raise config.ConfigError(f"{path}: detectors[{index}]: {exc}") from None
    return detectors


def limits(conf: config.Config) -> Limits:
    """The run limits of ``[descheduler]``."""
    return Limits(max_moves=conf.get("descheduler", "max_moves_per_run"),
                  max_moves_per_host=conf.get("descheduler", "max_moves_per_host"),
                  cold_migrate_passthrough=conf.get("descheduler", "cold_migrate_passthrough"),
                  live_migrate_vgpu=conf.get("descheduler", "live_migrate_vgpu"))
