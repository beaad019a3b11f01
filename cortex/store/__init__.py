"""The write side: everything Cortex writes besides the sync's snapshots.

Fleet imports (:mod:`~cortex.store.fleet`), agent topology reports
(:mod:`~cortex.store.reports`), network locations (:mod:`~cortex.store.network`), the
in-flight reservations (:mod:`~cortex.store.reservations`, in memory:
:mod:`~cortex.store.memory`) and the decision log (:mod:`~cortex.store.decisions`), with
the one knowledge version bump (:mod:`~cortex.store.version`). The read model that
these writes feed is :mod:`cortex.knowledge`.
"""
