"""A Nova call's intent is believed only where the body's flags and the spec back it."""

import pytest

from cortex.request.nova import intent_claims


def spec(check=None, force_hosts=None):
    """A spec with a ``_nova_check_type`` hint (list, or a scalar as older callers send)."""
    data = {"scheduler_hints": {} if check is None else {"_nova_check_type": check}}
    if force_hosts:
        data["force_hosts"] = force_hosts
    return data


REBUILD = spec(["rebuild"], ["cmp1"])

CASES = [
    ("plain-create", spec(), {}, ("create", None)),
    ("rebuild-backed", REBUILD, {"rebuild": True}, ("rebuild", None)),
    ("rebuild-scalar-hint", spec("rebuild", ["cmp1"]), {"rebuild": True}, ("rebuild", None)),
    ("rebuild-forged-at-create", spec(["rebuild"]), {}, ("create", "rebuild")),
    ("rebuild-hint-without-flag", REBUILD, {}, ("create", "rebuild")),
    ("rebuild-flag-without-force-hosts", spec(["rebuild"]), {"rebuild": True},
     ("create", "rebuild")),
    ("rebuild-hint-with-resize-flag", REBUILD, {"resize": True}, ("create", "rebuild")),
    ("resize-backed", spec(["resize"]), {"resize": True}, ("resize", None)),
    ("resize-forged", spec(["resize"]), {}, ("create", "resize")),
    ("live-backed", spec(["live_migrate"]), {"live": True}, ("live_migrate", None)),
    ("live-forged", spec(["live_migrate"]), {}, ("create", "live_migrate")),
    ("evacuate-no-flags", spec(["evacuate"]), {}, ("evacuate", None)),
    ("evacuate-with-a-flag", spec(["evacuate"]), {"rebuild": True}, ("create", "evacuate")),
    ("legacy-live-flag", spec(), {"live": True}, ("live_migrate", None)),
    ("legacy-resize-flag", spec(), {"resize": True}, ("resize", None)),
    ("legacy-rebuild-flag-backed", spec(force_hosts=["cmp1"]), {"rebuild": True},
     ("rebuild", None)),
    ("legacy-rebuild-flag-unbacked", spec(), {"rebuild": True}, ("create", "rebuild")),
    ("legacy-two-flags", spec(), {"resize": True, "live": True}, ("create", "live_migrate")),
    ("unknown-hint", spec(["shelve"]), {}, ("create", None)),
]


@pytest.mark.parametrize(("spec_data", "flags", "expected"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_intent_is_believed_only_when_flags_and_spec_agree(spec_data, flags, expected):
    assert intent_claims(spec_data, flags) == expected


def test_bundled_bodies_keep_their_intents():
    from tests.fakes import nova
    assert [nova(f).intent for f in ("cpu-resize", "cpu-live-migrate", "cpu-evacuate",
                                     "cpu-general-purpose")] == [
        "resize", "live_migrate", "evacuate", "create"]
