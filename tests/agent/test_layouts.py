"""The demo fleet's topology reports are what the agent says for their layouts."""

import json

import pytest

from tests.conftest import REPO
from tests.topology_fakes import DEMO_REPORTS, agent_report

SHIPPED = REPO / "etc" / "cortex" / "topology"
VOLATILE = ("agent_version", "collected_at", "host")


@pytest.mark.parametrize("name", DEMO_REPORTS)
def test_shipped_report_is_current(tmp_path, name):
    shipped = json.loads((SHIPPED / f"{name}.json").read_text())
    fresh = agent_report(name, tmp_path)
    for key in VOLATILE:
        shipped.pop(key, None)
        fresh.pop(key, None)
    assert shipped == fresh, f"regenerate: python -m tests.topology_fakes {SHIPPED}"


def test_every_shipped_report_has_a_layout():
    assert sorted(p.stem for p in SHIPPED.glob("*.json")) == sorted(DEMO_REPORTS)
