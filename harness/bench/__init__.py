"""The use-case layer for runs: what a verb calls to measure something end to end.

`pd.bench_pd` (harness bench-pd), `engine` (harness engine: check, dry run, session, --bench-pd),
`load.run_load` (one load run in a child process, used by bench-pd, compare-engines and sweep),
`workload.build_workload` (the artifact for a run), `progress` (the one live progress display),
`target_latency` (the embedded target's own schedule, in simulated seconds), and the two load-generator
benchmarks `tool_compare` and `loadgen_speed` (python -m harness.bench.tool_compare / .loadgen_speed), with the
independent one-token-per-write server they run against (`token_server`), the bare Locust-style baseline
(`bare_locust`) and the client hot-path microbenchmark (`client_cpu`).
This layer may import everything below it (report, model, specs, target, engines, store, workloads);
nothing below imports it (docs/architecture.md, checked by tests/test_architecture.py).
"""
