"""The OpenAPI document and the request validator built from it (cortex.api.schema)."""

import copy
import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from cortex.api.schema import (
    MAX_MESSAGES,
    SERVICES,
    RequestValidator,
    load_openapi,
    without_control_patterns,
)
from cortex.jsontext import may_hold_unnamable

FIXTURES = Path(__file__).parents[1] / "fixtures"
FIXTURE_FILES = [
    pytest.param(service, path, id=f"{service}/{path.stem}")
    for service in SERVICES
    for path in sorted((FIXTURES / service).glob("*.json"))
]
NOVA = "nova_object.data"
VO = "versioned_object.data"
SCHEDULER_PATHS = {f"/scheduler/{service}/external": service for service in SERVICES}
# The callers' own response schema (Nova, Cinder and Manila hooks), verbatim.
CALLERS_RESPONSE_SCHEMA = {
    "type": "object",
    "properties": {"hosts": {"type": "array", "items": {"type": "string"}}},
    "required": ["hosts"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def document():
    return load_openapi()


@pytest.fixture(scope="module")
def validator(document):
    return RequestValidator(document)


def fixture_body(service, name):
    return json.loads((FIXTURES / service / f"{name}.json").read_text())


def walk(node, path=()):
    """Yield (path, dict) for every dict in a JSON-like tree."""
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from walk(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from walk(value, (*path, index))


def unwrap(node):
    """The same tree with every oslo envelope replaced by its data (the plain form)."""
    if isinstance(node, dict):
        for key in (NOVA, VO):
            if key in node:
                return unwrap(node[key])
        return {key: unwrap(value) for key, value in node.items()}
    if isinstance(node, list):
        return [unwrap(value) for value in node]
    return node


def envelope(data, prefix="versioned_object", name="RequestSpec"):
    return {
        f"{prefix}.name": name,
        f"{prefix}.namespace": "cinder",
        f"{prefix}.version": "1.5",
        f"{prefix}.data": data,
        f"{prefix}.changes": sorted(data),
    }


# ------------------------------------------------------------------ the document


def test_document_header(document):
    assert document["openapi"] == "3.1.0"
    assert document["jsonSchemaDialect"] == "https://json-schema.org/draft/2020-12/schema"
    assert document["info"]["title"]
    assert document["info"]["version"]


def test_document_passes_the_official_openapi_3_1_schema(document):
    import openapi_spec_validator  # a test dependency: the check always runs

    openapi_spec_validator.validate(document)


def test_load_openapi_is_cached(document):
    assert load_openapi() is document


def test_document_is_json_serialisable(document):
    assert json.loads(json.dumps(document)) == document


@pytest.mark.parametrize(
    ("path", "methods"),
    [
        ("/scheduler/nova/external", {"post"}),
        ("/scheduler/cinder/external", {"post"}),
        ("/scheduler/manila/external", {"post"}),
        ("/healthcheck", {"get", "head"}),
        ("/", {"get"}),
        ("/openapi.json", {"get"}),
        ("/v1/decisions", {"get"}),
        ("/v1/decisions/{decision_id}", {"get"}),
        ("/v1/topology/{host}", {"get", "post"}),
    ],
)
def test_paths_and_methods(document, path, methods):
    item = document["paths"][path]
    assert item["description"].strip()
    operations = {m for m in item if m in {"get", "head", "post", "put", "patch", "delete"}}
    assert operations == methods
    for method in methods:
        assert item[method]["responses"], f"{method} {path} has no responses"


def test_every_path_and_schema_has_a_description(document):
    undocumented = [p for p, item in document["paths"].items() if not item.get("description")]
    undocumented += [n for n, s in document["components"]["schemas"].items()
                     if not str(s.get("description", "")).strip()]
    assert undocumented == []


@pytest.mark.parametrize("name", sorted(load_openapi()["components"]["schemas"]))
def test_component_schema_is_valid_2020_12(document, name):
    Draft202012Validator.check_schema(document["components"]["schemas"][name])


def test_every_ref_resolves(document):
    registry = Registry().with_resource(
        "urn:test", Resource.from_contents(document, default_specification=DRAFT202012))
    resolver = registry.resolver("urn:test")
    refs = [node["$ref"] for _, node in walk(document) if "$ref" in node]
    assert len(refs) > 50
    for ref in refs:
        assert ref.startswith("#/components/"), ref
        assert isinstance(resolver.lookup(ref).contents, dict), ref


def test_scheduler_paths_answer_the_callers_schema_and_errors(document):
    schemas = document["components"]["schemas"]
    response = {k: v for k, v in schemas["SchedulerResponse"].items() if k != "description"}
    assert response == CALLERS_RESPONSE_SCHEMA
    for path in SCHEDULER_PATHS:
        responses = document["paths"][path]["post"]["responses"]
        # 408: a body that did not arrive in time (the BodyGuard); non-2xx, so the caller
        # keeps its own order, like every other error here
        assert set(responses) == {"200", "400", "405", "408", "413", "415", "503"}
        ok = responses["200"]["content"]["application/json"]["schema"]
        assert ok == {"$ref": "#/components/schemas/SchedulerResponse"}
        for status in ("400", "405", "408", "413", "415", "503"):
            schema = responses[status]["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/Errors"}, (path, status)
        assert "Allow" in responses["405"]["headers"]


def test_errors_schema_is_api_wg_style(document):
    registry = Registry().with_resource(
        "urn:test", Resource.from_contents(document, default_specification=DRAFT202012))
    errors = Draft202012Validator(
        {"$ref": "urn:test#/components/schemas/Errors"}, registry=registry)
    good = {"errors": [{"status": 400, "title": "Bad Request", "detail": "x",
                        "request_id": "req-1", "code": "cortex.bad"}]}
    assert errors.is_valid(good)
    assert not errors.is_valid({"errors": [{"status": "400", "title": "t", "detail": "d",
                                            "request_id": "r"}]})
    assert not errors.is_valid({"errors": [{"status": 400, "title": "t", "detail": "d"}]})
    assert not errors.is_valid({"errors": []})


def test_validator_fails_at_construction_without_a_scheduler_path(document):
    broken = copy.deepcopy(document)
    del broken["paths"]["/scheduler/manila/external"]
    with pytest.raises(Unresolvable):
        RequestValidator(broken)


def test_validator_fails_at_construction_on_a_dangling_ref(document):
    broken = copy.deepcopy(document)
    del broken["components"]["schemas"]["FlavorData"]
    with pytest.raises(Unresolvable):
        RequestValidator(broken)


# ------------------------------------------------------------------ the fixtures


def test_there_are_fixtures_for_every_service():
    counts = {service: len(list((FIXTURES / service).glob("*.json"))) for service in SERVICES}
    assert counts["nova"] >= 10 and counts["cinder"] >= 10 and counts["manila"] >= 5, counts


@pytest.mark.parametrize(("service", "path"), FIXTURE_FILES)
def test_every_fixture_is_valid(validator, service, path):
    assert validator.errors(service, json.loads(path.read_text())) == []


@pytest.mark.parametrize(("service", "path"), FIXTURE_FILES)
def test_every_fixture_is_valid_unwrapped_too(validator, service, path):
    assert validator.errors(service, unwrap(json.loads(path.read_text()))) == []


@pytest.mark.parametrize(("service", "path"), FIXTURE_FILES)
def test_a_fixture_is_not_valid_for_a_body_without_hosts(validator, service, path):
    body = json.loads(path.read_text())
    del body["hosts"]
    assert validator.errors(service, body) == ["body: 'hosts' is a required property"]


# ------------------------------------------------------------- rejected bodies


def _set(*path_and_value):
    """A mutation that sets body[path...] = value."""
    *path, key, value = path_and_value

    def mutate(body):
        node = body
        for part in path:
            node = node[part]
        node[key] = value

    return mutate


def _delete(*path):
    def mutate(body):
        node = body
        for part in path[:-1]:
            node = node[part]
        del node[path[-1]]

    return mutate


REJECTED = [
    # (id, service, fixture, mutation, expected message prefix)
    ("flavor-vcpus-string", "nova", "gpu-2xh100-pinned",
     _set("spec", NOVA, "flavor", NOVA, "vcpus", "abc"),
     "spec.flavor.vcpus: 'abc' is not of type 'integer'"),
    ("flavor-extra-spec-int", "nova", "gpu-2xh100-pinned",
     _set("spec", NOVA, "flavor", NOVA, "extra_specs", "hw:numa_nodes", 1),
     "spec.flavor.extra_specs.hw:numa_nodes: 1 is not of type 'string'"),
    ("flavor-not-an-object", "nova", "cpu-general-purpose",
     _set("spec", NOVA, "flavor", "m1.small"),
     "spec.flavor: 'm1.small' is not of type 'object'"),
    ("flavor-envelope-version-int", "nova", "cpu-general-purpose",
     _set("spec", NOVA, "flavor", "nova_object.version", 1.2),
     "spec.flavor.nova_object.version: 1.2 is not of type 'string'"),
    ("nova-envelope-data-wrong-type", "nova", "cpu-general-purpose",
     _set("spec", NOVA, ["not", "an", "object"]),
     "spec.nova_object.data: ['not', 'an', 'object'] is not of type 'object'"),
    ("nova-spec-not-an-object", "nova", "cpu-general-purpose",
     _set("spec", "RequestSpec"), "spec: 'RequestSpec' is not of type 'object'"),
    ("weights-value-string", "nova", "cpu-general-purpose",
     _set("weights", "cmp0000", "1.5"), "weights.cmp0000: '1.5' is not of type 'number'"),
    ("weights-value-bool", "nova", "cpu-general-purpose",
     _set("weights", "cmp0000", True), "weights.cmp0000: True is not of type 'number'"),
    ("weights-value-null", "cinder", "extend-volume",
     _set("weights", "cinder-volume-1@netapp-a#aggr1", None),
     "weights.cinder-volume-1@netapp-a#aggr1: None is not of type 'number'"),
    ("weights-not-an-object", "manila", "create-share-nfs",
     _set("weights", [1.0]), "weights: [1.0] is not of type 'object'"),
    ("hosts-not-a-list", "nova", "cpu-general-purpose",
     _set("hosts", {"host": "cmp0000"}), "hosts: {'host': 'cmp0000'} is not of type 'array'"),
    ("host-entry-without-host", "nova", "cpu-general-purpose",
     _delete("hosts", 2, "host"), "hosts[2]: 'host' is a required property"),
    ("host-entry-empty-host", "cinder", "extend-volume",
     _set("hosts", 0, "host", ""), "hosts[0].host: '' should be non-empty"),
    ("host-entry-a-string", "manila", "create-share-nfs",
     _set("hosts", 0, "manila-share-1@netapp#aggr_ssd_1"),
     "hosts[0]: 'manila-share-1@netapp#aggr_ssd_1' is not of type 'object'"),
    ("hypervisor-hostname-int", "nova", "cpu-general-purpose",
     _set("hosts", 1, "hypervisor_hostname", 7), "hosts[1].hypervisor_hostname: 7 is not of type"),
    ("scheduler-hint-object", "nova", "cpu-resize",
     _set("spec", NOVA, "scheduler_hints", "_nova_check_type", {"type": "resize"}),
     "spec.scheduler_hints._nova_check_type: {'type': 'resize'} is not of type 'array'"),
    ("scheduler-hint-list-of-ints", "nova", "cpu-resize",
     _set("spec", NOVA, "scheduler_hints", "_nova_check_type", [1]),
     "spec.scheduler_hints._nova_check_type[0]: 1 is not of type 'string'"),
    ("pci-spec-not-a-list", "nova", "gpu-2xh100-pinned",
     _set("spec", NOVA, "pci_requests", NOVA, "requests", 0, NOVA, "spec", {"vendor_id": "10de"}),
     "spec.pci_requests.requests[0].spec: {'vendor_id': '10de'} is not of type 'array'"),
    ("numa-pcpuset-string", "nova", "gpu-2xh100-pinned",
     _set("spec", NOVA, "numa_topology", NOVA, "cells", 0, NOVA, "pcpuset", 3, "3"),
     "spec.numa_topology.cells[0].pcpuset[3]: '3' is not of type 'integer'"),
    ("numa-pagesize-string", "nova", "gpu-2xh100-pinned",
     _set("spec", NOVA, "numa_topology", NOVA, "cells", 0, NOVA, "pagesize", "1GB"),
     "spec.numa_topology.cells[0].pagesize: '1GB' is not of type 'integer', 'null'"),
    ("force-hosts-string", "nova", "force-and-ignore-hosts",
     _set("spec", NOVA, "force_hosts", "cmp0002"),
     "spec.force_hosts: 'cmp0002' is not of type 'array', 'null'"),
    ("group-hosts-string", "nova", "multi-create-anti-affinity",
     _set("spec", NOVA, "instance_group", NOVA, "hosts", "cmp0005"),
     "spec.instance_group.hosts: 'cmp0005' is not of type 'array', 'null'"),
    ("destination-aggregates-string", "nova", "requested-destination-aggregates",
     _set("spec", NOVA, "requested_destination", NOVA, "aggregates", "a,b"),
     "spec.requested_destination.aggregates: 'a,b' is not of type 'array', 'null'"),
    ("root-forbidden-string", "nova", "cpu-general-purpose",
     _set("spec", NOVA, "request_level_params", NOVA, "root_forbidden", "COMPUTE_X"),
     "spec.request_level_params.root_forbidden: 'COMPUTE_X' is not of type 'array'"),
    ("is-bfv-string", "nova", "cpu-general-purpose",
     _set("spec", NOVA, "is_bfv", "false"), "spec.is_bfv: 'false' is not of type 'boolean'"),
    ("live-flag-string", "nova", "cpu-live-migrate",
     _set("live", "true"), "live: 'true' is not of type 'boolean'"),
    ("pipeline-not-a-string", "nova", "cpu-general-purpose",
     _set("pipeline", 3), "pipeline: 3 is not of type 'string'"),
    ("pipeline-empty", "cinder", "extend-volume",
     _set("pipeline", ""), "pipeline: '' should be non-empty"),
    ("context-roles-string", "nova", "cpu-general-purpose",
     _set("context", "roles", "admin"), "context.roles: 'admin' is not of type 'array'"),
    ("context-request-id-int", "cinder", "extend-volume",
     _set("context", "request_id", 5), "context.request_id: 5 is not of type"),
    ("context-not-an-object", "manila", "create-share-nfs",
     _set("context", "req-1"), "context: 'req-1' is not of type 'object'"),
    ("missing-spec", "nova", "cpu-general-purpose",
     _delete("spec"), "body: 'spec' is a required property"),
    ("missing-weights", "cinder", "extend-volume",
     _delete("weights"), "body: 'weights' is a required property"),
    ("cinder-size-string", "cinder", "extend-volume",
     _set("spec", "volume_properties", "size", "768"),
     "spec.volume_properties.size: '768' is not of type 'integer', 'null'"),
    ("cinder-resource-size-string", "cinder", "create-snapshot",
     _set("spec", "resource_properties", "size", "512"),
     "spec.resource_properties.size: '512' is not of type 'integer', 'null'"),
    ("cinder-extra-spec-int", "cinder", "create-volume-thin-qos",
     _set("spec", "volume_type", "extra_specs", "thin_provisioning_support", 1),
     "spec.volume_type.extra_specs.thin_provisioning_support: 1 is not of type"),
    ("cinder-azs-string", "cinder", "create-volume-thin-qos",
     _set("spec", "availability_zones", "eu-de-1a"),
     "spec.availability_zones: 'eu-de-1a' is not of type 'array', 'null'"),
    ("cinder-operation-int", "cinder", "retype-on-demand",
     _set("spec", "operation", 1), "spec.operation: 1 is not of type 'string', 'null'"),
    ("cinder-spec-null", "cinder", "extend-volume",
     _set("spec", None), "spec: None is not of type 'object'"),
    ("manila-extra-spec-int", "manila", "create-share-type-az-backend",
     _set("spec", "share_type", "extra_specs", "dedupe", 1),
     "spec.share_type.extra_specs.dedupe: 1 is not of type 'string'"),
    ("manila-size-string", "manila", "create-share-nfs",
     _set("spec", "share_properties", "size", "100G"),
     "spec.share_properties.size: '100G' is not of type 'integer', 'null'"),
    ("manila-azs-string", "manila", "create-share-cifs-az",
     _set("spec", "availability_zones", "eu-de-1a"),
     "spec.availability_zones: 'eu-de-1a' is not of type 'array', 'null'"),
    ("manila-share-group-string", "manila", "create-share-nfs",
     _set("spec", "share_group", "g1"), "spec.share_group: 'g1' is not of type 'object', 'null'"),
]


@pytest.mark.parametrize(
    ("service", "name", "mutate", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in REJECTED],
)
def test_wrong_types_are_rejected_with_the_path(validator, service, name, mutate, expected):
    body = fixture_body(service, name)
    mutate(body)
    errors = validator.errors(service, body)
    assert errors, "mutated body was accepted"
    assert errors[0].startswith(expected), errors
    assert len(errors) <= MAX_MESSAGES


@pytest.mark.parametrize("service", SERVICES)
@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ([], "body: [] is not of type 'object'"),
        ("spec", "body: 'spec' is not of type 'object'"),
        (None, "body: None is not of type 'object'"),
        ({}, "body: 'spec' is a required property"),
    ],
)
def test_bodies_that_are_not_objects(validator, service, body, expected):
    assert validator.errors(service, body)[0] == expected


def test_cinder_envelope_errors_name_the_path_inside_the_data(validator):
    body = fixture_body("cinder", "extend-volume")
    body["spec"]["volume_properties"]["size"] = "768"
    body["spec"]["volume_properties"] = envelope(body["spec"]["volume_properties"],
                                                 name="VolumeProperties")
    body["spec"] = envelope(body["spec"])
    assert validator.errors("cinder", body) == [
        "spec.volume_properties.size: '768' is not of type 'integer', 'null'"]


def test_an_envelope_is_not_taken_for_a_plain_object(validator):
    # With "nova_object.data" present the plain branch must not accept the object, or a
    # wrong type inside the envelope would go unnoticed.
    body = fixture_body("nova", "cpu-general-purpose")
    body["spec"][NOVA]["flavor"][NOVA] = {"vcpus": "2"}
    assert validator.errors("nova", body) == [
        "spec.flavor.vcpus: '2' is not of type 'integer'"]


def test_several_problems_are_all_reported_shallow_first(validator):
    body = fixture_body("nova", "gpu-2xh100-pinned")
    flavor = body["spec"][NOVA]["flavor"][NOVA]
    flavor["vcpus"] = "32"
    flavor["swap"] = 1.5
    body["resize"] = "no"
    errors = validator.errors("nova", body)
    assert errors[0] == "resize: 'no' is not of type 'boolean'"
    assert set(errors[1:]) == {
        "spec.flavor.vcpus: '32' is not of type 'integer'",
        "spec.flavor.swap: 1.5 is not of type 'integer'",
    }


# Values Nova's object fields allow (oslo IntegerField and friends carry no bounds; the
# page-size keywords are nova/virt/hardware.py MEMPAGES_SMALL/LARGE/ANY = -1/-2/-3).
ALLOWED_BY_NOVA = [
    ("pagesize-small", "gpu-2xh100-pinned",
     _set("spec", NOVA, "numa_topology", NOVA, "cells", 0, NOVA, "pagesize", -1)),
    ("pagesize-large", "gpu-2xh100-pinned",
     _set("spec", NOVA, "numa_topology", NOVA, "cells", 0, NOVA, "pagesize", -2)),
    ("pagesize-any", "gpu-2xh100-pinned",
     _set("spec", NOVA, "numa_topology", NOVA, "cells", 0, NOVA, "pagesize", -3)),
    ("flavor-memory-negative", "cpu-general-purpose",
     _set("spec", NOVA, "flavor", NOVA, "memory_mb", -1)),
    ("pci-count-zero", "gpu-2xh100-pinned",
     _set("spec", NOVA, "pci_requests", NOVA, "requests", 0, NOVA, "count", 0)),
    ("num-instances-zero", "multi-create-anti-affinity", _set("spec", NOVA, "num_instances", 0)),
]


@pytest.mark.parametrize(("name", "fixture", "mutate"), ALLOWED_BY_NOVA,
                         ids=[case[0] for case in ALLOWED_BY_NOVA])
def test_values_nova_objects_allow_are_accepted(validator, name, fixture, mutate):
    body = fixture_body("nova", fixture)
    mutate(body)
    assert validator.errors("nova", body) == []


def test_at_most_five_messages(validator):
    body = fixture_body("nova", "gpu-2xh100-pinned")
    body["hosts"] = [{"hypervisor_hostname": f"n{i}"} for i in range(20)]
    errors = validator.errors("nova", body)
    assert len(errors) == MAX_MESSAGES
    assert errors[0] == "hosts[0]: 'host' is a required property"


def test_long_values_are_shortened_in_messages(validator):
    body = fixture_body("nova", "cpu-general-purpose")
    body["hosts"] = "x" * 5000
    (message,) = validator.errors("nova", body)
    assert message.startswith("hosts: 'xxx")
    assert message.endswith("... is not of type 'array'")
    assert len(message) < 200


def test_unknown_service_is_a_value_error(validator):
    with pytest.raises(ValueError, match="placement"):
        validator.errors("placement", fixture_body("nova", "cpu-general-purpose"))


# ------------------------------------------------------------ tolerated bodies


def _plain_nova_spec(body):
    body["spec"] = unwrap(body["spec"])


def _wrap_cinder_spec(body):
    body["spec"] = envelope(body["spec"])


def _wrap_cinder_nested(body):
    spec = body["spec"]
    spec["volume_type"] = envelope(spec["volume_type"], name="VolumeType")
    spec["volume_properties"] = envelope(spec["volume_properties"], name="VolumeProperties")
    body["spec"] = envelope(spec)


def _wrap_manila_spec(body):
    body["spec"] = envelope(body["spec"], name="ShareRequestSpec")


def _nova_spec_in_versioned_envelope(body):
    body["spec"] = envelope(body["spec"][NOVA])


def _strip_optional_nova_fields(body):
    for key in ("rebuild", "resize", "live", "vmware", "context"):
        del body[key]
    spec = body["spec"][NOVA]
    for key in ("image", "numa_topology", "pci_requests", "scheduler_hints", "instance_group",
                "limits", "retry", "request_level_params", "requested_resources",
                "force_hosts", "force_nodes", "ignore_hosts", "requested_destination",
                "is_bfv", "availability_zone", "project_id", "user_id", "instance_uuid"):
        spec.pop(key, None)
    for key in ("extra_specs", "swap", "description", "rxtx_factor"):
        del spec["flavor"][NOVA][key]


def _null_nullable_nova_fields(body):
    spec = body["spec"][NOVA]
    for key in ("image", "numa_topology", "pci_requests", "scheduler_hints", "instance_group",
                "limits", "retry", "request_level_params", "requested_resources",
                "force_hosts", "force_nodes", "ignore_hosts", "requested_destination",
                "is_bfv", "availability_zone", "project_id", "user_id", "instance_uuid"):
        spec[key] = None


def _unknown_fields_everywhere(body):
    body["x-future"] = {"anything": [1, "two"]}
    body["context"]["new_context_field"] = 42
    body["hosts"][0]["cell"] = "cell1"
    spec = body["spec"]
    spec["nova_object.new_meta"] = True
    spec[NOVA]["new_spec_field"] = {"deep": [None]}
    spec[NOVA]["flavor"][NOVA]["new_flavor_field"] = 1
    spec[NOVA]["numa_topology"][NOVA]["cells"][0][NOVA]["new_cell_field"] = "x"


TOLERATED = [
    ("unknown-fields-everywhere", "nova", "gpu-2xh100-pinned", _unknown_fields_everywhere),
    ("scalar-hint-string", "nova", "cpu-resize",
     _set("spec", NOVA, "scheduler_hints", "_nova_check_type", "resize")),
    ("scalar-hint-number", "nova", "cpu-general-purpose",
     _set("spec", NOVA, "scheduler_hints", "max_count", 3)),
    ("scalar-hint-bool", "nova", "cpu-general-purpose",
     _set("spec", NOVA, "scheduler_hints", "build_near_host_ip", False)),
    ("scheduler-hints-null", "nova", "cpu-general-purpose",
     _set("spec", NOVA, "scheduler_hints", None)),
    ("force-hosts-null", "nova", "force-and-ignore-hosts", _set("spec", NOVA, "force_hosts", None)),
    ("nullable-nova-fields-null", "nova", "cpu-general-purpose", _null_nullable_nova_fields),
    ("optional-nova-fields-absent", "nova", "gpu-8xh100-full-node", _strip_optional_nova_fields),
    ("nova-spec-plain", "nova", "gpu-8xh100-full-node", _plain_nova_spec),
    ("nova-spec-in-versioned-envelope", "nova", "gpu-1xa100-numa",
     _nova_spec_in_versioned_envelope),
    ("flavor-plain-inside-envelope", "nova", "cpu-general-purpose",
     _set("spec", NOVA, "flavor", {"vcpus": 2, "memory_mb": 4096, "extra_specs": {}})),
    ("group-rules-old-name", "nova", "multi-create-anti-affinity",
     _set("spec", NOVA, "instance_group", NOVA, "rules", {"max_server_per_host": 2})),
    ("hypervisor-hostname-null", "nova", "cpu-general-purpose",
     _set("hosts", 0, "hypervisor_hostname", None)),
    ("hypervisor-hostname-absent", "nova", "cpu-general-purpose",
     _delete("hosts", 0, "hypervisor_hostname")),
    ("duplicate-host-other-node", "nova", "vmware-hana",
     lambda b: b["hosts"].append({**b["hosts"][0], "hypervisor_hostname": "other-cluster"})),
    ("integer-and-negative-weights", "nova", "cpu-general-purpose",
     lambda b: b["weights"].update({"cmp0000": 3, "cmp0001": -12.5})),
    ("no-hosts", "cinder", "extend-volume", lambda b: b.update(hosts=[], weights={})),
    ("explicit-pipeline", "nova", "cpu-general-purpose", _set("pipeline", "gpu-numa")),
    ("context-absent", "manila", "create-share-nfs", _delete("context")),
    ("context-ids-null", "cinder", "extend-volume", _set("context", "global_request_id", None)),
    ("cinder-spec-versioned-envelope", "cinder", "create-volume-thin-qos", _wrap_cinder_spec),
    ("cinder-nested-envelopes", "cinder", "retype-on-demand", _wrap_cinder_nested),
    ("cinder-unknown-spec-field", "cinder", "migrate-volume",
     _set("spec", "force_host_copy", True)),
    ("cinder-extra-spec-null", "cinder", "create-volume-thin-qos",
     _set("spec", "volume_type", "extra_specs", "thin_provisioning_support", None)),
    ("cinder-optional-fields-null", "cinder", "create-volume-thin-qos",
     lambda b: b["spec"].update(volume=None, volume_type=None, availability_zones=None)),
    ("manila-spec-versioned-envelope", "manila", "create-share-replica", _wrap_manila_spec),
    ("manila-replica-hosts-list", "manila", "create-share-replica",
     _set("spec", "all_replica_hosts", ["manila-share-2@netapp#aggr_ssd_1"])),
    ("manila-fork-extra-field", "manila", "create-share-nfs",
     _set("spec", "project_domain_name", "Default")),
]


@pytest.mark.parametrize(
    ("service", "name", "mutate"),
    [pytest.param(*case[1:], id=case[0]) for case in TOLERATED],
)
def test_tolerated_variants_are_accepted(validator, service, name, mutate):
    body = fixture_body(service, name)
    mutate(body)
    assert validator.errors(service, body) == []


# ---------------------------------------------------------------- the answer


@pytest.mark.parametrize(
    "body", [{"hosts": []}, {"hosts": ["a"]}, {"hosts": ["cmp0003", "cmp0001"]}])
def test_response_validator_accepts(validator, body):
    assert validator.response_errors(body) == []


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"hosts": None}, "hosts: None is not of type 'array'"),
        ({"hosts": ["a"], "extra": 1}, "body: Additional properties are not allowed"),
        ({}, "body: 'hosts' is a required property"),
        ({"hosts": ["a", 1]}, "hosts[1]: 1 is not of type 'string'"),
        ({"hosts": "a"}, "hosts: 'a' is not of type 'array'"),
        (["a"], "body: ['a'] is not of type 'object'"),
    ],
)
def test_response_validator_rejects(validator, body, expected):
    errors = validator.response_errors(body)
    assert errors and errors[0].startswith(expected), errors


# The compiled fast path (jsonschema-rs) must agree with jsonschema on every body the
# tests know: a body one accepts and the other rejects would be a wrong type let
# through or a valid body answered 400.
def _verdicts(validator, service, body):
    fast_ok = validator._fast[service](body)
    slow_ok = not list(validator._requests[service].iter_errors(body))
    return fast_ok, slow_ok


def _plain_verdict(validator, service, body):
    """The control-free check's verdict, where the body's text allows it (else None)."""
    text = json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return None if may_hold_unnamable(text) else validator._fast_plain[service](body)


@pytest.mark.parametrize(
    ("service", "name", "mutate"),
    [pytest.param(c[1], c[2], c[3], id=c[0]) for c in REJECTED + TOLERATED],
)
def test_fast_path_agrees_with_jsonschema(validator, service, name, mutate):
    body = fixture_body(service, name)
    mutate(body)
    fast_ok, slow_ok = _verdicts(validator, service, body)
    assert fast_ok == slow_ok
    assert _plain_verdict(validator, service, body) in (None, slow_ok)


@pytest.mark.parametrize(("service", "path"), FIXTURE_FILES)
def test_fast_path_accepts_every_fixture(validator, service, path):
    body = json.loads(path.read_text())
    assert _verdicts(validator, service, body) == (True, True)
    assert _plain_verdict(validator, service, body) is True


@pytest.mark.parametrize("bad", ["\x00", "\x1b", "\x7f", "\x85", "\x9f"])
@pytest.mark.parametrize("place", ["host", "hypervisor_hostname", "weight key"])
def test_the_plain_names_check_is_only_for_plain_names_bodies(validator, bad, place):
    # the names' pattern is what refuses these; the control-free check has none
    body = fixture_body("nova", "gpu-2xh100-pinned")
    host = body["hosts"][0]["host"]
    if place == "hypervisor_hostname":
        body["hosts"][0][place] = f"node{bad}"
    else:
        body["weights"][f"{host}{bad}"] = body["weights"].pop(host)
        if place == "host":
            body["hosts"][0]["host"] = f"{host}{bad}"
    assert _verdicts(validator, "nova", body) == (False, False)
    assert validator._fast_plain["nova"](body)
    assert _plain_verdict(validator, "nova", body) is None
    assert validator.errors("nova", body, plain_names=False)


def test_without_control_patterns_drops_only_the_control_patterns(document):
    schemas = document["components"]["schemas"]
    plain = without_control_patterns(schemas)
    assert plain["Name"] == {k: v for k, v in schemas["Name"].items() if k != "pattern"}
    assert plain["Name"]["minLength"] == 1
    assert "pattern" not in plain["NameOrEmpty"] and "minLength" not in plain["NameOrEmpty"]
    assert schemas["Name"]["pattern"] == "^[^\\x00-\\x1f\\x7f-\\x9f]+$"  # a copy
    kept = {"type": "string", "pattern": "^[0-9a-f]{4}$",
            "enum": [{"pattern": "^[^\\x00-\\x1f\\x7f-\\x9f]+$"}]}
    assert without_control_patterns(kept) == kept
    grown = {"type": "string", "minLength": 3, "pattern": "^[^\\x00-\\x1f\\x7f-\\x9f]+$"}
    assert without_control_patterns(grown) == {"type": "string", "minLength": 3}
