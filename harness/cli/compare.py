"""Compare runs of one workload (or micro runs): per-metric deltas with intervals, verdicts, gates, a report.

  harness compare results/<m>/A results/<m>/B                     B against baseline A
  harness compare A B --fail-on ttft_p99_s:5%,output_tokens_per_s:-3%   exit 3 on a significant breach
  harness compare A1 A2 B1 B2                                      pairs runs by workload artifact (rate sweeps)

Within each workload artifact the first run given is the baseline. Runs of different workload
artifacts or scenarios are refused with the reason unless --force. A gate passes only when its whole
interval is on the good side of the bound; one whose interval reaches past the bound without a
significant breach is inconclusive and says how many requests per run would decide it.
Exit codes: 0 ok (every gate passed), 1 user or data error (or a gate with no data), 3 a gate
breached, 4 a gate inconclusive (measure longer).
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Any

from harness.cli._output import print_json
from harness.compare.compare import CompareOptions, compare_loaded
from harness.compare.gates import check_gates, check_known, parse_gates
from harness.compare.runs import load_run_data
from harness.errors import HarnessError, InconclusiveError, RegressionError
from harness.report.compare import render_comparison, render_text


def _fraction(name: str):
    def conv(raw: str) -> float:
        txt = raw.strip()
        try:
            v = float(txt[:-1]) / 100 if txt.endswith("%") else float(txt)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a fraction or a percentage (0.02 or 2%), got {raw!r}") from None
        if not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"{name} must be finite, got {raw!r}")
        return v

    return conv


def add_compare_options(parser: argparse.ArgumentParser) -> None:
    """Options shared by `compare` and `compare-engines`."""
    a = parser.add_argument
    a("--fail-on", metavar="GATES", default=None,
      help="gates METRIC:PERCENT,... e.g. ttft_p99_s:5%%,output_tokens_per_s:-3%% (exit 3 on a significant breach, "
           "4 when the interval is too wide to decide)")
    a("--to", metavar="DIR", default=None, help="report directory (default reports/compare-<A>-vs-<B>/)")
    a("--no-report", action="store_true", help="print the comparison without writing a report")
    a("--bootstrap", type=int, default=1000, metavar="N", help="bootstrap resamples per metric (default 1000)")
    a("--seed", type=int, default=0, help="bootstrap seed (default 0; the same seed repeats the result exactly)")
    a("--confidence", type=_fraction("--confidence"), default=0.95, help="interval level (default 0.95)")
    a("--min-effect", type=_fraction("--min-effect"), default=0.02,
      help="smallest |change| given a verdict (default 2%%)")
    a("--json", action="store_true", help="print the comparison as JSON")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run directories results/<machine>/<run_id>/ (baseline first)")
    parser.add_argument("--force", action="store_true", help="compare runs of different workloads or scenarios anyway")
    add_compare_options(parser)


def default_report_dir(cmp: Any) -> Path:
    a = cmp.pairs[0].baseline.run_id if cmp.pairs else "runs"
    b = cmp.pairs[-1].candidate.run_id if cmp.pairs else time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return Path("reports") / f"compare-{a}-vs-{b}"


def finish(cmp: Any, args: argparse.Namespace, gates: list) -> int:
    """Check gates, write the report, print; raise RegressionError (exit 3) on a breach, HarnessError (1) on a gate with no
    data, InconclusiveError (4) on a gate the runs cannot decide."""
    outcomes = check_gates(cmp, gates) if gates else []
    paths: list[Path] = []
    if not args.no_report:
        out = Path(args.to) if args.to else default_report_dir(cmp)
        paths = render_comparison(cmp, out, outcomes)
    report = next((str(p) for p in paths if p.name == "index.html"), None)
    breaches = [o for o in outcomes if o.status == "breach"]
    if args.json:
        print_json({**cmp.to_dict(), "gates": [o.to_dict() for o in outcomes], "report": report,
                    "breached": bool(breaches)})
    else:
        print(render_text(cmp, outcomes, report))
    if breaches:
        raise RegressionError(f"{len(breaches)} gate(s) breached: " + "; ".join(o.message for o in breaches))
    unchecked = [o for o in outcomes if o.status == "no data"]
    if unchecked:
        raise HarnessError(f"{len(unchecked)} gate(s) could not be checked: " + "; ".join(o.message for o in unchecked))
    undecided = [o for o in outcomes if o.status == "inconclusive"]
    if undecided:
        raise InconclusiveError(f"{len(undecided)} gate(s) inconclusive: " + "; ".join(o.message for o in undecided))
    return 0


def main(args: argparse.Namespace) -> int:
    gates = parse_gates(args.fail_on)  # a malformed gate fails before any work
    for r in args.runs:
        if not Path(r).is_dir():
            raise HarnessError(f"run {r!r} is not a directory; give results/<machine>/<run_id>/ of a stored run.")
    opts = CompareOptions(n_boot=args.bootstrap, seed=args.seed, confidence=args.confidence, min_effect=args.min_effect,
                          force=args.force)
    runs = [load_run_data(r) for r in args.runs]
    check_known(gates, list(dict.fromkeys(n for r in runs for n in r.metrics)))  # a typo'd metric before the bootstrap
    return finish(compare_loaded(runs, opts), args, gates)

