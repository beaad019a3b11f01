"""cortex-descheduler: move instances off contended hosts and win back whole GPU islands.

:mod:`cortex.descheduler.config` reads the detectors, :mod:`.nova` asks Nova to move an
instance and follows the move to its end, :mod:`.runner` runs one pass (plan through
the pipelines, record, execute) and :mod:`.loop` repeats it on the leader.
"""
