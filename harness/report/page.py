"""A report page: sections of text, tables and PNG figures, written as one self-contained HTML file
(figures embedded as base64 data URIs, no scripts, no external resources) plus a Markdown summary
that links the same figures written under figures/."""

from __future__ import annotations

import base64
import html
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True)
class Figure:
    name: str  # file stem, [a-z0-9-]
    title: str
    png: bytes
    caption: str = ""


@dataclass(frozen=True)
class Table:
    columns: list[str]
    rows: list[list[str]]
    caption: str = ""


Item = Union[str, Table, Figure]


@dataclass
class Section:
    heading: str
    items: list[Item] = field(default_factory=list)


@dataclass
class Page:
    title: str
    subtitle: str = ""
    sections: list[Section] = field(default_factory=list)

    def section(self, heading: str) -> Section:
        s = Section(heading)
        self.sections.append(s)
        return s

    @property
    def figures(self) -> list[Figure]:
        return [i for s in self.sections for i in s.items if isinstance(i, Figure)]

    def write(self, out_dir: str | Path) -> list[Path]:
        """Write index.html, summary.md and figures/<name>.png; return the paths written."""
        from harness.errors import HarnessError

        out = Path(out_dir)
        try:
            (out / "figures").mkdir(parents=True, exist_ok=True)
            written = []
            for f in self.figures:
                written.append(_write(out / "figures" / f"{f.name}.png", f.png))
            written.append(_write(out / "index.html", self.html().encode()))
            written.append(_write(out / "summary.md", self.markdown().encode()))
        except OSError as exc:
            raise HarnessError(f"report directory {str(out_dir)!r} cannot be written ({exc}); give a writable directory "
                               "(--to).") from None
        return written

    def html(self) -> str:
        e = html.escape
        parts = [
            "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{e(self.title)}</title>",
            "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
            "table{border-collapse:collapse;margin:.5em 0;font-size:.9em}td,th{border:1px solid #ccc;padding:.25em .5em;"
            "text-align:left;vertical-align:top}th{background:#f3f3f3}img{max-width:100%;border:1px solid #eee}"
            "figcaption,.caption{color:#555;font-size:.9em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em}</style>",
            "</head><body>", f"<h1>{e(self.title)}</h1>",
        ]
        if self.subtitle:
            parts.append(f"<p class=\"caption\">{e(self.subtitle)}</p>")
        for s in self.sections:
            parts.append(f"<h2>{e(s.heading)}</h2>")
            for it in s.items:
                if isinstance(it, str):
                    parts.append(f"<p>{e(it)}</p>")
                elif isinstance(it, Table):
                    head = "".join(f"<th>{e(c)}</th>" for c in it.columns)
                    body = "".join("<tr>" + "".join(f"<td>{e(str(v))}</td>" for v in r) + "</tr>" for r in it.rows)
                    parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
                    if it.caption:
                        parts.append(f"<p class=\"caption\">{e(it.caption)}</p>")
                else:
                    data = base64.b64encode(it.png).decode()
                    parts.append(f"<figure><img alt=\"{e(it.title)}\" src=\"data:image/png;base64,{data}\">"
                                 f"<figcaption><b>{e(it.title)}.</b> {e(it.caption)}</figcaption></figure>")
        parts.append("</body></html>")
        return "\n".join(parts) + "\n"

    def markdown(self) -> str:
        lines = [f"# {self.title}", ""]
        if self.subtitle:
            lines += [self.subtitle, ""]
        for s in self.sections:
            lines += [f"## {s.heading}", ""]
            for it in s.items:
                if isinstance(it, str):
                    lines += [it, ""]
                elif isinstance(it, Table):
                    cell = lambda v: str(v).replace("|", "\\|").replace("\n", " ")  # noqa: E731
                    lines.append("| " + " | ".join(cell(c) for c in it.columns) + " |")
                    lines.append("|" + "---|" * len(it.columns))
                    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in it.rows]
                    lines += ["", it.caption, ""] if it.caption else [""]
                else:
                    lines += [f"![{it.title}](figures/{it.name}.png)", "", f"*{it.title}.* {it.caption}", ""]
        return "\n".join(lines)


def _write(path: Path, data: bytes) -> Path:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path
