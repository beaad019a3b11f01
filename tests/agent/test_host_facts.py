"""cortex-agent's host facts (CPU vendor, topology, physical address bits, Nova's my_ip)
and the view's nodes taking them where the hypervisor API gave none."""

import json

from cortex.agent import host as host_facts
from cortex.db import migrate
from cortex.db.engine import make_engine
from cortex.knowledge.loader import load_view
from cortex.store.fleet import import_fleet
from tests.conftest import REPO
from tests.topology_fakes import agent_report

REPORT = json.loads((REPO / "etc/cortex/topology/l40s-4gpu-pcie.json").read_text())


def test_the_agent_reports_the_kernels_cpu_facts(tmp_path):
    report = agent_report("l40s-4gpu-pcie", tmp_path)
    assert report["cpu_info"] == {
        "arch": "x86_64", "vendor": "AMD", "maxphysaddr": {"bits": 46},
        "topology": {"cells": 2, "sockets": 2, "cores": 32, "threads": 2}}
    assert "host_ip" not in report  # nova.conf sets no my_ip
    grace = agent_report("gh200", tmp_path / "gh200")["cpu_info"]
    assert grace["arch"] == "aarch64" and "vendor" not in grace


def test_the_agent_reads_novas_my_ip(tmp_path):
    conf = tmp_path / "nova.conf"
    conf.write_text("[DEFAULT]\nmy_ip = 192.0.2.10\n[compute]\ncpu_shared_set = 0-3\n")
    assert host_facts.host_ip(conf) == "192.0.2.10"
    assert host_facts.host_ip(tmp_path / "missing.conf") is None


def test_a_node_takes_the_agents_facts_where_the_sync_has_none(empty_database_url):
    report = dict(REPORT, host_ip="192.0.2.10")
    hosts = [{"host": "bare", "uuid": "00000000-0000-0000-0000-000000000001",
              "topology": {"report": report}},
             {"host": "synced", "uuid": "00000000-0000-0000-0000-000000000002",
              "cpu_info": {"arch": "x86_64", "vendor": "Intel", "features": ["avx2"]},
              "host_ip": "10.0.0.2", "topology": {"report": report}}]
    engine = make_engine(empty_database_url)
    try:
        migrate.upgrade(engine)
        with engine.begin() as connection:
            import_fleet(connection, {"hosts": hosts})
        view = load_view(engine)
    finally:
        engine.dispose()
    bare = view.hosts["bare"].all_nodes[0]
    assert dict(bare.cpu_info) == REPORT["cpu_info"] and bare.host_ip == "192.0.2.10"
    synced = view.hosts["synced"].all_nodes[0]
    assert synced.cpu_info["vendor"] == "Intel" and synced.host_ip == "10.0.0.2"
