"""Reports: one renderer per output, picked from a registry; renderers read results/ only, never measure."""

# report name -> "module:function" rendering (run_or_runs, out_dir) -> list of written paths; one line each
RENDERERS: dict[str, str] = {
    "calibration": "harness.report.calibration:render",
    "bench-pd": "harness.report.bench_pd:render",
    "compare": "harness.report.compare:render",
    "ch19": "harness.report.ch19:render",
}
