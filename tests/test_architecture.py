"""The one-way layering of docs/architecture.md: no module imports a higher layer (import-linter contracts in
pyproject.toml), the check can fail, and the picture script draws every layer from the code."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("importlinter", reason="pip install import-linter (a dev dependency)")


def _lint(config: Path) -> int:
    from importlinter.cli import lint_imports

    return lint_imports(config_filename=str(config), no_cache=True, no_logo=True)


def test_imports_flow_one_way(capsys):
    rc = _lint(ROOT / "pyproject.toml")
    out = capsys.readouterr().out
    assert rc == 0, "a module imports a higher layer (docs/architecture.md):\n" + out
    assert "2 kept, 0 broken" in out


def test_the_layer_check_fails_on_an_upward_import(tmp_path, capsys):
    # the same code against the layering turned upside down: the model above the verbs must be refused
    cfg = tmp_path / "upside-down.toml"
    cfg.write_text('[tool.importlinter]\nroot_packages = ["harness"]\nexclude_type_checking_imports = true\n\n'
                   '[[tool.importlinter.contracts]]\nname = "model above cli"\ntype = "layers"\n'
                   'layers = ["harness.model", "harness.cli"]\n')
    assert _lint(cfg) == 1
    assert "harness.cli is not allowed to import harness.model" in capsys.readouterr().out


def _script():
    spec = importlib.util.spec_from_file_location("import_graph", ROOT / "scripts" / "import_graph.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["import_graph"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_the_picture_is_drawn_from_the_code_and_flags_upward_edges():
    ig = _script()
    layers = ig.read_layers(ROOT / "pyproject.toml")
    assert layers.names[0] == ["harness.cli", "harness.__main__"] and "harness.errors" in layers.names[-1]
    edges, present = ig.group_edges(layers)
    assert ("harness.cli", "harness.bench") in edges and ("harness.model", "harness.specs") in edges
    assert not any(a == "workloads" and b in ("harness.bench", "harness.report", "harness.model", "harness.target")
                   for a, b in edges)  # workloads is a leaf
    text = ig.mermaid(layers, ig.shown(layers, edges, all_edges=False), present)
    assert text.startswith("```mermaid\nflowchart TB") and all(f'["{e}"]' in text for e in present)
    # an edge pointing up a layer is dashed: add one and it is drawn as a violation
    edges[("harness.model", "harness.cli")] = 1
    assert "harness_model -.->|1| harness_cli" in ig.mermaid(layers, edges, present)


def test_the_architecture_doc_places_every_layer_entry():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    ig = _script()
    for layer in ig.read_layers(ROOT / "pyproject.toml").names:
        for entry in layer:
            assert f"`{entry}`" in doc, f"docs/architecture.md does not place {entry}"
    assert ig.START in doc and ig.END in doc
