"""harness.toml_file: one TOML loader (one error text for every input file) and one dotted-key override."""

import pytest

from harness.errors import HarnessError
from harness.toml_file import load_toml, set_dotted


@pytest.mark.parametrize("content, needle", [
    (b"\xff\xfe\x00\x01binary", "is not UTF-8 text (byte 0: invalid start byte)"),
    (b'name = "caf\xe9"', "is not UTF-8 text (byte 11"),
    (b"name = ", "is not valid TOML"),
])
def test_bad_files_are_named_with_the_fix(tmp_path, content, needle):
    p = tmp_path / "x.toml"
    p.write_bytes(content)
    with pytest.raises(HarnessError) as e:
        load_toml(p, "scenario")
    assert needle in str(e.value) and str(p) in str(e.value) and str(e.value).startswith("scenario ")


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(HarnessError, match="scenario file .* does not exist; look in x"):
        load_toml(tmp_path / "none.toml", "scenario", "look in x")
    with pytest.raises(HarnessError, match="is a directory, not a TOML file"):
        load_toml(tmp_path, "engine config")


@pytest.mark.parametrize("loader", ["scenario", "engine"])
def test_every_loader_uses_it(tmp_path, loader):
    from harness.engines.config import load_engine_config
    from harness.specs.scenario import load_any_scenario

    p = tmp_path / "x.toml"
    p.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    with pytest.raises(HarnessError, match="is not UTF-8 text"):
        (load_any_scenario if loader == "scenario" else load_engine_config)(p)


def test_set_dotted():
    d = {"a": {"b": 1}, "s": 2}
    set_dotted(d, "a.c", 3, "--grid", "f.toml")
    set_dotted(d, "x.y.z", 4, "--grid", "f.toml")
    set_dotted(d, "top", 5, "--grid", "f.toml")
    assert d == {"a": {"b": 1, "c": 3}, "s": 2, "x": {"y": {"z": 4}}, "top": 5}
    with pytest.raises(HarnessError, match=r"--grid s.q: 's' is not a section of f.toml"):
        set_dotted(d, "s.q", 1, "--grid", "f.toml")
    with pytest.raises(HarnessError, match="override a..b: an empty name between dots"):
        set_dotted(d, "a..b", 1, "override", "f.toml")


def test_value_or_word():
    from harness.toml_file import value_or_word

    assert value_or_word("2") == 2 and value_or_word("0.5") == 0.5 and value_or_word("true") is True
    assert value_or_word("[1, 2]") == [1, 2] and value_or_word('"x y"') == "x y"
    assert value_or_word("fixed") == "fixed" and value_or_word("a/b.toml") == "a/b.toml"
