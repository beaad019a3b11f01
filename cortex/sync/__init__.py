"""Sync: pull the cloud's state from OpenStack and Prometheus into PostgreSQL.

One leader (:mod:`cortex.sync.leader`) runs each source (:mod:`cortex.sync.sources`)
on its own schedule (:mod:`cortex.sync.loop`); every run writes a full snapshot of
that source in one transaction (:mod:`cortex.sync.snapshot`), refreshes the
knowledge tables and host features it feeds (:mod:`cortex.sync.derive`) and bumps
the knowledge version when anything changed. Imports only :mod:`cortex.db`.
"""
