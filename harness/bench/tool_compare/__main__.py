"""python -m harness.bench.tool_compare: see the package docstring."""

from harness.bench.tool_compare.cli import main

raise SystemExit(main())
