"""What the weigher tests share: a flavor, a grouped request, a plugin from options, a weight."""

from cortex.plugins.base import build_options
from cortex.request.base import Candidate
from tests.fakes import nova, view

FLAVOR = {"vcpus": 4, "memory_mb": 8192, "root_gb": 80, "extra_specs": {}}


def weight(plugin, state, request, knowledge=None, nodes=()):
    bound = plugin.bind(request, knowledge or view(state))
    return bound.weigh(state, request, Candidate(state.host, nodes, 0.0))


def make(cls, **options):
    return cls(build_options(cls, options))


def grouped(policy, members=(), hosts=()):
    return nova(spec={"instance_group": {"uuid": "g", "policy": policy,
                                         "members": list(members), "hosts": list(hosts)}})
