"""weigher_pci: minus the host's free passthrough devices, scaled."""

import pytest

from cortex.plugins.base import OptionsError, build_options
from cortex.plugins.weighers.pci import PCIWeigher
from tests.fakes import host
from tests.gpu_fakes import gpu_host, gpu_request, weigh
from tests.unit.gpu_boards import HGX


@pytest.mark.parametrize("in_use, expected", [((), -1.0), (HGX[:3], -5 / 8), (HGX, 0.0)])
def test_pci_weigher_stacks_by_free_devices(in_use, expected):
    assert weigh(PCIWeigher(), gpu_host(in_use=in_use), gpu_request()) == expected
    assert weigh(PCIWeigher(), host("plain"), gpu_request()) == 0.0


@pytest.mark.parametrize("options, message", [
    ({"max_devices": 0}, "max_devices"),
])
def test_options_are_validated(options, message):
    with pytest.raises(OptionsError, match=message):
        build_options(PCIWeigher, options)
