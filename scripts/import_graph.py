"""Draw the import graph of the harness by layer, from the code (grimp), as Mermaid or Graphviz DOT.

The layers are the `layers` contract of pyproject.toml's [tool.importlinter] section (the one the layering test,
tests/test_architecture.py, checks with import-linter), so the picture, the test and docs/architecture.md share
one definition. Each node is one entry of a layer (a package or module); an edge A --> B says some module of A
imports some module of B (inside functions too; TYPE_CHECKING imports left out), labelled with how many such
imports there are. An edge that points up a layer is drawn dashed and red: a violation (the contract's
ignore_imports lists the known ones).

  .venv/bin/python scripts/import_graph.py                      # Mermaid on stdout
  .venv/bin/python scripts/import_graph.py --dot | dot -Tpng -o imports.png
  .venv/bin/python scripts/import_graph.py --update docs/architecture.md   # rewrite the picture in the doc
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- import-graph:start -->", "<!-- import-graph:end -->"


@dataclass(frozen=True)
class Layers:
    names: list[list[str]]  # top layer first; each a list of module names
    root_packages: list[str]
    exclude_type_checking: bool

    def index(self, module: str) -> tuple[int, str] | None:
        """(layer index, entry) of the longest layer entry that is `module` or contains it."""
        best = None
        for i, layer in enumerate(self.names):
            for entry in layer:
                if (module == entry or module.startswith(entry + ".")) and (best is None or len(entry) > len(best[1])):
                    best = (i, entry)
        return best


def read_layers(pyproject: Path = ROOT / "pyproject.toml") -> Layers:
    cfg = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]
    contract = next(c for c in cfg["contracts"] if c["type"] == "layers")
    names = [[m.strip().strip("()").strip() for m in re.split(r"[:|]", layer) if m.strip()] for layer in contract["layers"]]
    return Layers(names, list(cfg["root_packages"]), bool(cfg.get("exclude_type_checking_imports", False)))


def group_edges(layers: Layers) -> tuple[Counter[tuple[str, str]], set[str]]:
    """(importer entry, imported entry) -> number of module-level imports between them; and the entries that exist."""
    import grimp

    g = grimp.build_graph(*layers.root_packages, exclude_type_checking_imports=layers.exclude_type_checking, cache_dir=None)
    edges: Counter[tuple[str, str]] = Counter()
    present: set[str] = set()
    for m in g.modules:
        a = layers.index(m)
        if a is None:
            continue
        present.add(a[1])
        for d in g.find_modules_directly_imported_by(m):
            b = layers.index(d)
            if b is not None and a[1] != b[1]:
                edges[(a[1], b[1])] += 1
    return edges, present


def _id(name: str) -> str:
    return name.replace(".", "_").replace("__", "")


def shown(layers: Layers, edges: Counter[tuple[str, str]], all_edges: bool) -> Counter[tuple[str, str]]:
    """Edges into the bottom layer (errors, units, records, store, telemetry: every layer may use them) are left
    out of the picture unless `all_edges`; an upward edge is always shown."""
    level = {e: i for i, layer in enumerate(layers.names) for e in layer}
    bottom = len(layers.names) - 1
    return Counter({(a, b): n for (a, b), n in edges.items() if all_edges or level[b] != bottom or level[a] == bottom})


def mermaid(layers: Layers, edges: Counter[tuple[str, str]], present: set[str]) -> str:
    level = {e: i for i, layer in enumerate(layers.names) for e in layer}
    lines = ["```mermaid", "flowchart TB"]
    for i, layer in enumerate(layers.names):
        lines.append(f'  subgraph L{i}["layer {i + 1}"]')
        lines += [f'    {_id(e)}["{e}"]' for e in layer if e in present]
        lines.append("  end")
    up = []
    for k, ((a, b), n) in enumerate(sorted(edges.items())):
        upward = level[a] > level[b]
        lines.append(f"  {_id(a)} {'-.->' if upward else '-->'}|{n}| {_id(b)}")
        if upward:
            up.append(k)
    for k in up:
        lines.append(f"  linkStyle {k} stroke:#d00,stroke-width:2px")
    lines.append("```")
    return "\n".join(lines)


def dot(layers: Layers, edges: Counter[tuple[str, str]], present: set[str]) -> str:
    level = {e: i for i, layer in enumerate(layers.names) for e in layer}
    out = ["digraph imports {", "  rankdir=TB; node [shape=box, fontname=Helvetica];"]
    for i, layer in enumerate(layers.names):
        out.append(f'  subgraph cluster_{i} {{ label="layer {i + 1}"; ' + " ".join(f'"{e}";' for e in layer if e in present) + " }")
    for (a, b), n in sorted(edges.items()):
        style = ', color=red, style=dashed' if level[a] > level[b] else ""
        out.append(f'  "{a}" -> "{b}" [label={n}{style}];')
    out.append("}")
    return "\n".join(out)


def update(doc: Path, text: str) -> None:
    s = doc.read_text()
    if START not in s or END not in s:
        raise SystemExit(f"error: {doc} has no {START} ... {END} block to rewrite; add one where the picture goes.")
    head, rest = s.split(START, 1)
    _, tail = rest.split(END, 1)
    doc.write_text(f"{head}{START}\n{text}\n{END}{tail}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dot", action="store_true", help="Graphviz DOT instead of Mermaid")
    ap.add_argument("--update", metavar="DOC", help="rewrite the Mermaid block between the import-graph markers of DOC")
    ap.add_argument("--all-edges", action="store_true", help="also draw the edges into the bottom layer (errors, records, ...)")
    args = ap.parse_args(argv)
    layers = read_layers()
    edges, present = group_edges(layers)
    edges = shown(layers, edges, args.all_edges)
    text = dot(layers, edges, present) if args.dot else mermaid(layers, edges, present)
    if args.update:
        update(Path(args.update), text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
