"""The scheduler: one call from a typed request to a typed decision, outside HTTP.

:mod:`~cortex.scheduler.service` orchestrates a call (knowledge view, pipeline choice,
in-flight reservations, the pipeline, the promise, the record);
:mod:`~cortex.scheduler.promise` re-checks and reserves the answer's first host;
:mod:`~cortex.scheduler.metrics` declares the calls' Prometheus metrics.
"""
