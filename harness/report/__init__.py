"""Reports: one renderer per output, picked from a registry; renderers read results/ only, never measure."""

# report name -> "module:function", a harness.report.renderer.Renderer: render(source, out_dir, options) -> list of
# written paths; its module declares RUN_KINDS (harness.report.registry picks by them); one line each
RENDERERS: dict[str, str] = {
    "calibration": "harness.report.calibration:render",
    "bench-pd": "harness.report.bench_pd:render",
    "compare": "harness.report.compare:render",
    "ch19": "harness.report.ch19:render",
    "loop": "harness.report.loop:render",
}
