"""Which GPUs nova-compute hands an instance: Cortex's model against Nova's own claim.

Cortex predicts the devices nova-compute will claim on a host
(:func:`cortex.rules.device_choice.predict_claim`); the GPU weighers, the in-flight
reservations, the commitments' holds and the simulator all rest on that prediction.
``nova_side.py`` (in the Nova virtualenv) claims them as nova-compute does for every
generated pair Nova's filters pass: the instance's NUMA cells fitted by
``numa_fit_instance_to_host``, then ``PciDeviceStats.consume_requests`` on a fresh
tracker. Both must name the same PCI addresses.
"""

from __future__ import annotations

import json

from cortex.knowledge.topology import topology_from_report
from cortex.request.devices import DeviceCatalog
from cortex.request.nova import NovaRequest
from cortex.rules.device_choice import predict_claim
from tests.differential.fleet_app import ALIASES
from tests.differential.test_nova_differential import HOSTS, REQUESTS, SEED, nova_lines


def test_cortex_predicts_the_gpus_nova_compute_claims():
    lines = nova_lines(SEED, REQUESTS, HOSTS)
    hosts = {line["host"]: line for line in lines if line["kind"] == "host"}
    catalog = DeviceCatalog.from_json(json.dumps(ALIASES))
    compared, wrong = 0, []
    for line in (item for item in lines if item["kind"] == "request"):
        request = NovaRequest.from_body(line["body"], devices=catalog)
        for host, claimed in line["claims"].items():
            if not claimed or not line["nova"][host]:
                continue  # no device asked, or Nova refuses the host
            facts = hosts[host]
            claim = predict_claim(topology_from_report(facts["report"]), request,
                                  facts["cpu_allocation_ratio"], facts["ram_allocation_ratio"])
            compared += 1
            predicted = sorted(claim.devices) if claim is not None else None
            if predicted != sorted(claimed):
                wrong.append((line["id"], host, predicted, claimed))
    assert compared >= 50, f"only {compared} claims with devices: the generator changed"
    assert wrong == [], f"{len(wrong)} of {compared} claims predicted wrong: {wrong[:5]}"
