"""The knowledge is read from one snapshot: a report replaced while a worker loads.

An agent's report replaces the host's rows (its ``host_topology`` row and the GPUs,
cells and links under it) in one transaction. The loader reads those tables in several
statements; were each statement to see what was committed when it ran, a report
replaced between the header's read and the GPUs' would leave the host with no GPUs,
at a knowledge version that no later report bumps (a repeated report changes nothing
it counts), so the worker would hold a GPU host without GPUs until the next change.
"""

import pytest

from cortex.knowledge import reports as stored_reports
from cortex.knowledge.loader import load_view
from cortex.knowledge.reports import read_reports
from cortex.store.reports import store_report


def gpu_host(engine) -> str:
    """A host of the view (a Nova host of the demo fleet) whose report lists GPUs."""
    hosts = load_view(engine).hosts
    with engine.connect() as connection:
        found = read_reports(connection, sorted(hosts))
    return next(host for host, report in sorted(found.items()) if report["gpus"])


def test_a_report_replaced_between_the_loaders_reads_is_not_torn(engine, monkeypatch):
    if engine.dialect.name != "postgresql":
        pytest.skip("SQLite serialises the writer behind the reader's transaction")
    host = gpu_host(engine)
    with engine.connect() as connection:
        report = read_reports(connection, [host])[host]
    reported_at = report.pop("reported_at")
    cells = stored_reports._cells
    replaced = []

    def cells_after_a_new_report(*args, **kwargs):
        if not replaced:  # the agent reports again, the same facts, after the headers' read
            with engine.begin() as connection:
                store_report(connection, host, report, reported_at)
            replaced.append(host)
        return cells(*args, **kwargs)

    monkeypatch.setattr(stored_reports, "_cells", cells_after_a_new_report)
    view = load_view(engine)
    assert replaced == [host]
    topology = view.hosts[host].topology
    assert len(topology.gpus) == len(report["gpus"]) > 0
    assert len(topology.cells) == len(report["numa_cells"])
