"""Twins built without llama.cpp, for the bench-pd prediction tests: a roofline twin (a twin.json), and an engine
step-time calibration fitted on synthetic points of a random GGUF with its llama.cpp engine config."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.specs.models import ModelSpec
from harness.target.llama_server import LlamaServerSettings
from harness.target.step_times import RooflineStepTimes
from harness.target.twin import TwinSpec, save_twin

HERE = Path(__file__).resolve().parent

# a Gemma-3-270M-shaped model; with these constants a 128-token prefill takes ~0.53 s and a decode step ~0.1 s,
# long beside the HTTP path's few milliseconds (the test twin serves itself over HTTP)
GEMMA_LIKE = ModelSpec(name="gemma-like", n_layers=18, hidden_size=640, n_heads=4, n_kv_heads=1, head_dim=256,
                       intermediate_size=2048, vocab_size=262144, source="test", tie_word_embeddings=True)
SLOW_FLOPS_PER_S, SLOW_BYTES_PER_S = 50e9, 2.5e9


def roofline_twin(slots: int = 4, ctx_size: int = 4096, **settings) -> TwinSpec:
    return TwinSpec("llama.cpp", LlamaServerSettings(slots=slots, ctx_size=ctx_size, **settings),
                    RooflineStepTimes(GEMMA_LIKE, SLOW_FLOPS_PER_S, SLOW_BYTES_PER_S, 0.92, 2.0, "test constants"),
                    "gemma-like", "test constants (roofline)")


def write_twin(path: Path, spec: TwinSpec | None = None) -> Path:
    return save_twin(spec or roofline_twin(), path)


def engine_config(tmp_path: Path, model: Path, *, threads: int = 1, parallel: int = 2, ctx_size: int = 2048,
                  name: str = "fake-llama", binary: Path | None = None) -> Path:
    p = tmp_path / f"{name}.toml"
    p.write_text(f'''schema_version = 1
name = "{name}"
engine = "llama.cpp"
[model]
path = "{model}"
[llama_cpp]
{f'binary = "{binary}"' if binary else ''}
threads = {threads}
ctx_size = {ctx_size}
parallel = {parallel}
[startup]
timeout_s = 30
stop_timeout_s = 5
''')
    return p


def random_model(tmp_path: Path) -> Path:
    sys.path.insert(0, str(HERE.parent / "engines"))
    from random_gguf import write_random_gguf  # noqa: PLC0415

    return write_random_gguf(tmp_path / "rand.gguf")


def write_step_time(tmp_path: Path, model: Path, *, threads: int = 1, machine: str | None = None) -> Path:
    """A step-time calibration of `model` fitted on noiseless synthetic points (known constants)."""
    from harness.calibration.step_time import StepPoint, WorkModel, engine_family_of_gguf, fit_step_time, save_step_time
    from harness.model.step_time import StepConstants, calibrated_step_s
    from harness.records import machine_fingerprint
    from harness.specs.gguf_model import read_gguf

    wm = WorkModel.from_gguf(model)
    dec = StepConstants(alpha_s=2e-3, s_per_byte=1 / 10e9, s_per_flop=1 / 60e9)
    pre = StepConstants(alpha_s=15e-3, s_per_byte=0.0, s_per_flop=1 / 140e9)
    pts = [StepPoint("prefill", 1, p, 0.0, t, (t,), "llama-batched-bench", f"pp{p}")
           for p in (32, 64, 128, 256, 512) for t in [sum(calibrated_step_s(pre, c) for c in wm.prefill_work(p))]]
    pts += [StepPoint("decode", b, c, float(c), t, (t,), "llama-batched-bench", f"tg-b{b}-c{c}")
            for b in (1, 2, 4) for c in (32, 256, 1024) for t in [calibrated_step_s(dec, wm.decode_work(b, c))]]
    cal = fit_step_time(pts, wm, machine=machine or machine_fingerprint(), family=engine_family_of_gguf(read_gguf(model)),
                        threads=threads, holdout="none", n_bootstrap=10)
    return save_step_time(cal, tmp_path / "host.step-time.json")


def write_json(path: Path, data) -> Path:
    path.write_text(json.dumps(data))
    return path
