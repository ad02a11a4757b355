"""The use-case layer for runs: what a verb calls to measure something end to end.

`pd.bench_pd` (harness bench-pd), `engine.bench_pd_against` (harness engine --bench-pd), `load.run_load` (one
load run in a child process, used by bench-pd, compare-engines and sweep), `workload.build_workload` (the
artifact for a run) and `progress` (the one live progress printer). This layer may import everything below it
(model, specs, target, report, store, workloads); nothing below imports it (docs/architecture.md).
"""
