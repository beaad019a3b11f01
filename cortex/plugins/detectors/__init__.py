"""The descheduler's detectors: which instances are worth moving, and why.

Each module registers one :class:`cortex.plugins.base.Detector`; ``cortex-descheduler``
runs those its ``detectors_file`` names. Where a candidate goes is the pipelines'
answer (:mod:`cortex.scheduler.deschedule`).
"""
