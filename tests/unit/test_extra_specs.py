"""The shared extra-spec matcher, case by case as Nova's, Cinder's and Manila's docs decide.

Each row: the host's (or pool's) value, the extra spec's requirement, and the outcome
Nova (nova/scheduler/filters/extra_specs_ops.py, the "Filter scheduler" docs' operator
table) or Cinder/Manila (``<is>``) would give. Rows marked "Cortex:" are where Cortex
deliberately decides otherwise, and say why.
"""

import pytest

from cortex.rules.extra_specs import lookup, match, unmet


@pytest.mark.parametrize("value, requirement, expected", [
    # no operator: exact string equality
    ("1", "1", True),
    ("1", "2", False),
    ("QEMU", "qemu", False),            # case matters in Nova
    ("1", "", False),
    # '=' means numeric >= (Nova's historical meaning, documented as such)
    ("123", "= 123", True),
    ("124", "= 123", True),
    ("34", "= 234", False),
    ("4096", "= 2048", True),
    ("123", "=", False),                # an operator without an operand never matches
    # numeric operators
    ("123", "== 123", True),
    ("123.0", "== 123", True),
    ("124", "== 123", False),
    ("123", "!= 123", False),
    ("124", "!= 123", True),
    ("1000", ">= 1000", True),
    ("999", ">= 1000", False),
    ("1", "<= 10", True),
    ("11", "<= 10", False),
    ("abc", ">= 10", False),            # Cortex: not a number never matches (Nova raises)
    # string operators
    ("abc", "s== abc", True),
    ("abcd", "s== abc", False),
    ("abc", "s!= abd", True),
    ("abc", "s!= abc", False),
    ("abc", "s< abd", True),
    ("abc", "s< abc", False),
    ("abc", "s<= abc", True),
    ("abd", "s<= abc", False),
    ("abd", "s> abc", True),
    ("abc", "s> abc", False),
    ("bcd", "s>= abc", True),
    ("aaa", "s>= abc", False),
    # <in>: substring of the value; only the first word counts
    ("12311321", "<in> 11", True),
    ("12311321", "<in> 12311321", True),
    ("12311321", "<in> 12311321 <in>", True),
    ("12310321", "<in> 11", False),
    ("12310321", "<in> 11 <in>", False),
    ("NFS_CIFS", "<in> CIFS", True),
    # <all-in>: every word in the value
    ("['aes', 'mmx', 'aux']", "<all-in> aes mmx", True),
    ("['aes', 'mmx', 'aux']", "<all-in> aes mmx aux", True),
    ("['aes', 'mmx', 'aux']", "<all-in> aes mmx txt", False),
    ("['aes', 'mmx', 'aux']", "<all-in>", False),
    # <or>: the value equals one of the alternatives
    ("12", "<or> 11 <or> 12", True),
    ("11", "<or> 11 <or> 12", True),
    ("13", "<or> 11 <or> 12", False),
    ("13", "<or> 11 <or> 12 <or>", False),
    ("12", "<or> 11 <or> 12 <or>", True),
    ("<or>", "<or> 11 <or> 12", False),   # the keyword itself is not an alternative
    # not an operator: compared as a plain string
    ("12", "> 11", False),
    ("> 11", "> 11", True),
    # missing values never match
    (None, "1", False),
    (None, "<in> 1", False),
    (None, "= 1", False),
])
def test_nova_operators(value, requirement, expected):
    assert match(value, requirement) is expected


@pytest.mark.parametrize("value, requirement, expected", [
    # Cinder and Manila: <is> reads both sides as booleans
    (True, "<is> True", True),
    (False, "<is> True", False),
    ("true", "<is> True", True),
    (True, "<is> False", False),
    (False, "<is> false", True),
    # a boolean capability against a plain requirement compares as booleans
    (True, "True", True),
    (True, "true", True),
    (False, "True", False),
    # list capabilities (Cinder/Manila thin_provisioning [True, False]): any element
    ([True, False], "<is> True", True),
    ([False], "<is> True", False),
    (["NFS", "CIFS"], "<in> CIFS", True),
    # Cortex: <in>/<all-in> on a list test membership (Nova searches str(list), so
    # "<in> avx" would also match "avx512f")
    (["avx2", "avx512f"], "<in> avx", False),
    (["avx", "avx2", "aes"], "<all-in> avx aes", True),
    (["avx2", "aes"], "<all-in> avx aes", False),
])
def test_boolean_and_list_values(value, requirement, expected):
    assert match(value, requirement) is expected


def test_lookup_walks_nested_and_json_capabilities():
    caps = {"cpu_info": '{"arch": "x86_64", "topology": {"cores": 56}}', "a": {"b": 1}}
    assert lookup(caps, ["cpu_info", "topology", "cores"]) == 56
    assert lookup(caps, ["a", "b"]) == 1
    assert lookup(caps, ["a", "c"]) is None
    assert lookup({"cpu_info": "not json"}, ["cpu_info", "arch"]) is None


CAPS = {"hypervisor_type": "QEMU", "vcpus_total": 64, "opt": "x"}


@pytest.mark.parametrize("specs, unscoped, expected", [
    ({"capabilities:vcpus_total": ">= 32"}, "if-present", None),
    ({"capabilities:vcpus_total": ">= 128"}, "if-present",
     "vcpus_total=64 does not meet capabilities:vcpus_total=>= 128"),
    ({"capabilities:missing": "1"}, "if-present",
     "no capability missing for capabilities:missing=1"),
    ({"trust:trusted_host": "true", "hw:cpu_policy": "dedicated"}, "if-present", None),
    # unscoped keys: ComputeCapabilities checks them only if the host has them ...
    ({"unknown_key": "1"}, "if-present", None),
    ({"opt": "y"}, "if-present", "opt=x does not meet opt=y"),
    # ... the aggregate, Cinder and Manila filters always
    ({"unknown_key": "1"}, "check", "no capability unknown_key for unknown_key=1"),
    ({"unknown_key": "1"}, "skip", None),
])
def test_unmet_scopes(specs, unscoped, expected):
    assert unmet(specs, CAPS, "capabilities", unscoped=unscoped) == expected


def test_unmet_fold_case_and_any_element():
    assert unmet({"capabilities:hypervisor_type": "qemu"}, CAPS, "capabilities") is not None
    assert unmet({"capabilities:hypervisor_type": "qemu"}, CAPS, "capabilities",
                 fold_case=frozenset({"hypervisor_type"})) is None
    metadata = {"ssd": ["true"], "tier": ["gold", "silver"]}
    assert unmet({"tier": "silver"}, metadata, "x", any_element=True) is None
    assert unmet({"tier": "bronze"}, metadata, "x", any_element=True) is not None
    # Nova's aggregate filter tries each value: no single value holds both words
    assert unmet({"tier": "<all-in> gold silver"}, metadata, "x", any_element=True) is not None
