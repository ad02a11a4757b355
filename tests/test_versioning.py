"""harness.versioning: one field, step-wise upgrades, newer refused; used by every versioned file."""

import pytest

from harness.errors import HarnessError
from harness.versioning import VERSION_FIELD, check_version, load_versioned, stamp_version, version_problem


def test_steps_apply_in_order_from_the_stated_version():
    seen = []
    ups = {1: lambda d: (seen.append(1), {**d, "b": d["a"] * 2})[1], 2: lambda d: (seen.append(2), {**d, "c": d["b"] + 1})[1]}
    assert load_versioned({"schema_version": 1, "a": 3}, 3, ups, "f") == {"schema_version": 3, "a": 3, "b": 6, "c": 7}
    assert seen == [1, 2]
    seen.clear()
    assert load_versioned({"schema_version": 2, "b": 1}, 3, ups, "f") == {"schema_version": 3, "b": 1, "c": 2}
    assert seen == [2]


def test_legacy_field_name_is_read_and_dropped():
    d = load_versioned({"format_version": 1, "x": 1}, 2, {1: lambda d: d}, "f", legacy_fields=("format_version",))
    assert d == {"schema_version": 2, "x": 1}


def test_default_for_documents_that_state_no_version():
    assert load_versioned({"x": 1}, 1, {}, "f", default=1) == {"schema_version": 1, "x": 1}
    with pytest.raises(HarnessError, match="f: schema_version is missing; this file was not written by this harness"):
        load_versioned({"x": 1}, 1, {}, "f")


@pytest.mark.parametrize("v, needle", [
    (3, "f: schema_version 3 is newer than this harness understands (2); upgrade the harness."),
    (0, "schema_version must be an integer >= 1, got 0; make a new one."),
    (-1, "schema_version must be an integer >= 1, got -1"),
    ("2", "schema_version must be an integer >= 1, got '2'"),
    (True, "schema_version must be an integer >= 1, got True"),
    (1.0, "schema_version must be an integer >= 1, got 1.0"),
    ([1], "schema_version must be an integer >= 1, got [1]"),
])
def test_bad_and_newer_versions_are_refused_naming_the_field(v, needle):
    with pytest.raises(HarnessError) as e:
        load_versioned({"schema_version": v}, 2, {1: lambda d: d}, "f", fix="make a new one")
    assert needle in str(e.value)


def test_not_a_table_and_missing_step():
    with pytest.raises(HarnessError, match="must be a table of fields at the top level, got list"):
        load_versioned([1], 1, {}, "f")
    with pytest.raises(HarnessError, match="no upgrade step from schema_version 1 to 2"):
        load_versioned({"schema_version": 1}, 2, {}, "f")


def test_stamp_and_check():
    assert stamp_version({"a": 1, "schema_version": 9}, 2) == {"schema_version": 2, "a": 1}
    assert list(stamp_version({"a": 1}, 2)) == [VERSION_FIELD, "a"]
    assert check_version(2, 2, "f") == 2 and version_problem(1, 2) is None
