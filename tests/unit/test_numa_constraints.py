"""Guest NUMA cells derived from flavor and image exactly as Nova's numa_get_constraints."""

import copy

import pytest

from cortex.request import BadRequest
from cortex.request.numa import numa_constraints
from tests.conftest import bodies, load_body
from tests.fakes import nova


@pytest.mark.parametrize("path", bodies("nova"), ids=lambda p: p.stem)
def test_derivation_reproduces_novas_own_cells(path):
    """The bundled bodies' numa_topology was computed by Nova itself."""
    body = load_body(path)
    from cortex.request import NovaRequest

    with_spec = NovaRequest.from_body(body)
    stripped = copy.deepcopy(body)
    stripped["spec"]["nova_object.data"].pop("numa_topology", None)
    assert NovaRequest.from_body(stripped).guest_numa == with_spec.guest_numa


def cells(vcpus=4, memory=4096, image=None, **specs):
    found, emulator = numa_constraints(vcpus, memory, specs, image or {})
    return [(sorted(c["cpuset"]), sorted(c["pcpuset"]), c["memory"], c["pagesize"],
             c["cpu_policy"], c["cpu_thread_policy"]) for c in found], emulator


@pytest.mark.parametrize("specs, image, expected", [
    ({}, {}, []),
    ({"hw:cpu_policy": "shared"}, {}, []),
    ({"hw:numa_nodes": "1"}, {}, [([0, 1, 2, 3], [], 4096, None, None, None)]),
    ({"hw:numa_nodes": "2"}, {}, [([0, 1], [], 2048, None, None, None),
                                  ([2, 3], [], 2048, None, None, None)]),
    ({"hw:cpu_policy": "dedicated"}, {},
     [([], [0, 1, 2, 3], 4096, None, "dedicated", None)]),
    ({}, {"hw_cpu_policy": "dedicated", "hw_cpu_thread_policy": "isolate"},
     [([], [0, 1, 2, 3], 4096, None, "dedicated", "isolate")]),
    ({"hw:mem_page_size": "1GB"}, {}, [([0, 1, 2, 3], [], 4096, 1048576, None, None)]),
    ({"hw:mem_page_size": "2MB"}, {}, [([0, 1, 2, 3], [], 4096, 2048, None, None)]),
    ({"hw:mem_page_size": "2048"}, {}, [([0, 1, 2, 3], [], 4096, 2048, None, None)]),
    ({"hw:mem_page_size": "large"}, {}, [([0, 1, 2, 3], [], 4096, -2, None, None)]),
    ({"hw:mem_page_size": "any"}, {"hw_mem_page_size": "1GB"},
     [([0, 1, 2, 3], [], 4096, 1048576, None, None)]),
    ({"hw:mem_page_size": "small"}, {}, [([0, 1, 2, 3], [], 4096, -1, None, None)]),
    ({"resources:PCPU": "4"}, {}, [([], [0, 1, 2, 3], 4096, None, "dedicated", None)]),
    ({"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "^0-1"}, {},
     [([0, 1], [2, 3], 4096, None, "mixed", None)]),
    ({"hw:cpu_policy": "mixed", "hw:cpu_realtime": "yes", "hw:cpu_realtime_mask": "3"}, {},
     [([0, 1, 2], [3], 4096, None, "mixed", None)]),
    ({"hw:numa_nodes": "2", "hw:numa_cpus.0": "0", "hw:numa_cpus.1": "1-3",
      "hw:numa_mem.0": "1024", "hw:numa_mem.1": "3072"}, {},
     [([0], [], 1024, None, None, None), ([1, 2, 3], [], 3072, None, None, None)]),
    ({"hw:numa_nodes": "2"}, {"hw_numa_cpus": [[0, 1, 2], [3]], "hw_numa_mem": [3072, 1024]},
     [([0, 1, 2], [], 3072, None, None, None), ([3], [], 1024, None, None, None)]),
    ({}, {"hw_numa_nodes": 2}, [([0, 1], [], 2048, None, None, None),
                                ([2, 3], [], 2048, None, None, None)]),
])
def test_constraints(specs, image, expected):
    assert cells(image=image, **specs)[0] == expected


def test_emulator_threads_policy_is_kept():
    assert cells(**{"hw:cpu_policy": "dedicated",
                    "hw:emulator_threads_policy": "isolate"})[1] == "isolate"
    assert cells(**{"resources:PCPU": "5", "hw:emulator_threads_policy": "isolate"})[0][0][1] \
        == [0, 1, 2, 3]


@pytest.mark.parametrize("specs, image, message", [
    ({"hw:numa_nodes": "3"}, {}, "cannot be split evenly"),
    ({"hw:numa_nodes": "0"}, {}, "not a positive integer"),
    ({"hw:numa_nodes": "2"}, {"hw_numa_nodes": 2}, "may not set hw_numa_nodes"),
    ({"hw:numa_nodes": "2", "hw:numa_cpus.0": "0-1", "hw:numa_mem.0": "2048"}, {},
     "must both be given"),
    ({"hw:numa_nodes": "2", "hw:numa_cpus.0": "0-1", "hw:numa_cpus.1": "2",
      "hw:numa_mem.0": "2048", "hw:numa_mem.1": "2048"}, {}, "in no cell"),
    ({"hw:numa_nodes": "2", "hw:numa_cpus.0": "0-2", "hw:numa_cpus.1": "2-3",
      "hw:numa_mem.0": "2048", "hw:numa_mem.1": "2048"}, {}, "in two cells"),
    ({"hw:numa_nodes": "2", "hw:numa_cpus.0": "0-1", "hw:numa_cpus.1": "2-4",
      "hw:numa_mem.0": "2048", "hw:numa_mem.1": "2048"}, {}, "out of range"),
    ({"hw:numa_nodes": "2", "hw:numa_cpus.0": "0-1", "hw:numa_cpus.1": "2-3",
      "hw:numa_mem.0": "2048", "hw:numa_mem.1": "1024"}, {}, "differ from"),
    ({}, {"hw_mem_page_size": "1GB"}, "needs the flavor's consent"),
    ({"hw:mem_page_size": "small"}, {"hw_mem_page_size": "1GB"}, "conflicts"),
    ({"hw:mem_page_size": "huge"}, {}, "not a page size"),
    ({"hw:cpu_policy": "shared"}, {"hw_cpu_policy": "dedicated"}, "needs the flavor's consent"),
    ({"hw:cpu_policy": "pinned"}, {}, "is not one of"),
    ({"hw:cpu_thread_policy": "require"}, {"hw_cpu_thread_policy": "isolate"}, "conflicts"),
    ({"hw:cpu_policy": "dedicated", "resources:PCPU": "4"}, {}, "cannot be combined"),
    ({"resources:PCPU": "2", "resources:VCPU": "2"}, {}, "cannot be combined"),
    ({"resources:PCPU": "3"}, {}, "must equal"),
    ({"hw:cpu_policy": "mixed"}, {}, "needs hw:cpu_dedicated_mask"),
    ({"hw:cpu_dedicated_mask": "0"}, {}, "needs hw:cpu_policy=mixed"),
    ({"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "0-3"}, {}, "some, but not all"),
    ({"hw:emulator_threads_policy": "isolate"}, {}, "needs pinned CPUs"),
    ({"hw:emulator_threads_policy": "dedicated"}, {}, "share or isolate"),
])
def test_what_nova_rejects_is_a_bad_request(specs, image, message):
    with pytest.raises(BadRequest, match=message):
        numa_constraints(4, 4096, specs, image)


def test_request_without_spec_topology_derives_it():
    request = nova("cpu-general-purpose", flavor={"extra_specs": {
        "hw:numa_nodes": "2", "hw:cpu_policy": "dedicated"}, "vcpus": 4, "memory_mb": 8192})
    assert [len(c.pcpuset) for c in request.guest_numa] == [2, 2]
    assert request.numa_cells == ()  # what the spec carried is left as it was
