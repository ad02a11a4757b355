"""Words a user reads: `harness --version`; no dates in any verb's --help (help says what a flag does now; dated
findings belong in docs/log/)."""

from __future__ import annotations

import argparse
import re

import pytest

from harness import __version__
from harness.cli import build_parser, main

DATE = re.compile(r"\b(19|20)\d\d-\d\d(-\d\d)?\b|\b20[2-3]\d\b|\b(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]* \d{1,2}\b")


def _helps(parser: argparse.ArgumentParser, name: str = "harness"):
    yield name, parser.format_help()
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for verb, sub in a.choices.items():  # harness loop's too, now that h45-loop rewrote it
                yield from _helps(sub, f"{name} {verb}")


def test_version(capsys):
    # issue 48 item 11: there was no `harness --version`
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and re.match(rf"harness {re.escape(__version__)} \((commit [0-9a-f]{{12}}|not a git checkout)", out)


def test_no_dates_in_help():
    dated = [f"{name}: {line.strip()}" for name, text in _helps(build_parser()) for line in text.splitlines() if DATE.search(line)]
    assert dated == []
