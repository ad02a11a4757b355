"""The README a new user reads: the two set-up commands first, what the tool does, the task table, the status in a
few lines with links that resolve; no lab diary (dated figures live in docs/log/)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_opens_with_the_two_set_up_commands():
    lines = README.splitlines()
    assert lines[0] == "# llm-dist-harness" and lines[2] == "```"
    assert lines[3].startswith("make bench-pd   # ") and lines[4].startswith("make test       # ") and lines[5] == "```"


def test_no_lab_diary():
    # issue 48 item 11: 10.7 KB of the 18.3 KB README was a closed-loop diary dated 2026-11-29 ... 2026-12-05
    dated = [ln for ln in README.splitlines() if re.search(r"\b20\d\d-\d\d-\d\d\b", ln)]
    assert dated == [] and len(README.encode()) < 10_000


def test_says_which_book_chapter_9_is_and_how_to_install_the_engine():
    assert README.count("Распределённый инференс") == 1 and "make install-engine" in README
    assert "(docs/loop-cpu.md)" in README and "## Status" in README


def test_relative_links_resolve():
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", README)
    assert links and [p for p in links if not (ROOT / p).exists()] == []
