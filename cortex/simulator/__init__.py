"""Trace-driven placement simulator: replays GPU VM arrivals and departures through real pipelines.

``cortex-manage simulate`` (:mod:`cortex.simulator.session`) reads a fleet
(:mod:`~cortex.simulator.fleet`, boards in :mod:`~cortex.simulator.boards`) and a trace
(:mod:`~cortex.simulator.trace`), replays it per pipeline on a simulated cloud
(:mod:`~cortex.simulator.cloud`, :mod:`~cortex.simulator.replay`) and reports
(:mod:`~cortex.simulator.report`). It uses the pipeline, plugin, knowledge and request
layers in process; never the API or the database.
"""
