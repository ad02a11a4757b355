"""llama.cpp's own benchmarks as microbenchmark backends: the kernels the engine runs, at the model's shapes.

- `backend_ops` — `test-backend-ops perf -b CPU -o MUL_MAT --test-file F`, where F holds the
  matrix multiplications of the model's own graph (exported by llama.cpp's
  `test-export-graph-ops` from the GGUF at each token count), per weight type and shape;
- `bench` — `llama-bench -o jsonl` (prompt processing and generation, raw repetitions);
- `batched_bench` — `llama-batched-bench --output-format jsonl` (prefill time vs prompt length,
  decode step time at batch × context);
- `run` — runs them and stores one micro run (the same micro_cases / micro_samples tables as
  every suite), with each tool's version and exact command line in the manifest.

Each case carries its kernel family (`ggml-q4_K-cpu` for one weight type's kernels,
`ggml-q4_K_M-cpu` for the engine running a Q4_K_M file; harness.calibration.family).
"""
