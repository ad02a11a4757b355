"""How tests/data/store/v1/ was made (kept for provenance; the committed files are what tests load).

A schema-version-1 micro run as the harness wrote it before version 2: durations as integer
nanoseconds in `*_ns` columns, a manifest without `telemetry` / `cpu_cores_available`. The
numbers are illustrative, of the magnitude a CPU memcpy case has: a format fixture, not a measurement.
Run: python tests/data/store/make_v1_fixture.py
"""

import json
from pathlib import Path

import pandas as pd

HERE = Path(__file__).parent / "v1" / "cpu--intel-r-xeon-r-processor" / "20261101T120000Z-micro-v1fix"

manifest = {
    "run_id": "20261101T120000Z-micro-v1fix", "kind": "micro", "machine": "cpu--intel-r-xeon-r-processor",
    "created_unix_s": 1793534400.0, "command_line": ["harness", "micro", "run", "--suite", "transfer", "--quick"],
    "harness_version": "0.1.0", "harness_commit": "23e3a58", "harness_dirty": False, "host": "vm",
    "cpu_model": "Intel(R) Xeon(R) Processor", "cpu_cores": 2, "python_version": "3.11.7", "platform": "Linux-x86_64",
    "seeds": {"numpy": 0}, "gpu_name": None, "gpu_driver": None, "cuda_version": None, "torch_version": "2.13.0+cpu",
    "clocks": {}, "engine": {}, "notes": ["telemetry off: NVML unavailable"], "extra": {}, "status": "complete", "schema_version": 1,
}
cases = pd.DataFrame([
    {"case_id": "transfer:memcpy-4194304:numpy:cpu:uint8", "suite": "transfer", "case": "memcpy-4194304", "backend": "numpy",
     "device": "cpu", "dtype": "uint8", "params_json": '{"payload_bytes": 4194304}', "n_samples": 3, "inner_reps": 1,
     "median_ns": 310000, "p10_ns": 301000, "p90_ns": 352000, "mean_ns": 321000, "min_ns": 300000, "cv": 0.07,
     "useful_flops": 0.0, "padded_flops": 0.0, "useful_bytes": 8388608.0, "padded_bytes": 8388608.0,
     "flops_per_s": float("nan"), "bytes_per_s": 8388608.0 / 310e-6, "mfu": float("nan"), "mbu": float("nan"),
     "peak_flops_per_s": float("nan"), "peak_bytes_per_s": float("nan"), "peak_source": "host", "timer": "perf_counter_ns",
     "cache_state": "warm", "unstable": False, "valid": True, "flags_json": "[]", "source": "harness",
     "schema_version": 1, "run_id": manifest["run_id"]},
])
samples = pd.DataFrame([{"case_id": cases.case_id[0], "rep": i, "time_ns": t, "inner_reps": 1, "schema_version": 1,
                         "run_id": manifest["run_id"]} for i, t in enumerate([300000, 310000, 352000])])

if __name__ == "__main__":
    for t, df in (("micro_cases", cases), ("micro_samples", samples)):
        (HERE / t).mkdir(parents=True, exist_ok=True)
        df.to_parquet(HERE / t / "part-00001.parquet", index=False)
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=2))
