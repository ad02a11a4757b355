"""Synthetic micro runs generated from known constants, in exactly the stored format (tests, fixtures).

Each case's true time follows from the constants (decode: bytes/(MBU·peak); gemm: FLOPs/(MFU·peak);
transfer: α + S/β; ...), and its samples are that time times log-normal noise of the given CV, so a
fit must recover the constants within the noise. Rows are built with microbench.case.CaseResult and
written with harness.store.RunWriter, the same path a real run takes. Every manifest says it is
synthetic; nothing here measures.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness.specs.models import get_model
from microbench.params import (
    CpuExpertParams,
    DecodeParams,
    GemmParams,
    HostBandwidthParams,
    StageDecodeParams,
    StagePrefillParams,
    StorageParams,
    TransferParams,
)


def chapter_decode_mbu(batch: float) -> float:
    """Chapter 9, §9.2.3: decode MBU 33 % at batch 1 -> 65 % at batch 64, linear in the batch in between."""
    return 0.33 + (0.65 - 0.33) * (batch - 1) / 63


@dataclass(frozen=True)
class SyntheticMachine:
    machine: str = "synthetic-h200"
    gpu_name: str | None = "NVIDIA H200"
    gpu_driver: str | None = "550.00-synthetic"
    cpu_model: str = "Synthetic CPU"
    peak_flops_per_s: float = 989.4e12
    peak_bytes_per_s: float = 4800e9
    peak_source: str = "synthetic: H200 datasheet peaks"
    dtype: str = "bf16"
    decode_batches: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    decode_context: int = 8704
    decode_mbu: tuple[float, ...] = tuple(chapter_decode_mbu(b) for b in (1, 2, 4, 8, 16, 32, 64))
    prefill_tokens: tuple[int, ...] = (512, 1024, 2048, 4096, 8192)
    prefill_mfu: tuple[float, ...] = (0.58, 0.59, 0.60, 0.61, 0.62)
    # (link, direction, memory, alpha_s, bandwidth_bytes_per_s)
    links: tuple[tuple[str, str, str | None, float, float], ...] = (
        ("pcie", "h2d", "pinned", 10e-6, 50e9),
        ("pcie", "d2h", "pinned", 12e-6, 48e9),
    )
    transfer_sizes: tuple[int, ...] = tuple(4096 * 4**k for k in range(10))  # 4 KiB … 1 GiB
    cpu_expert_flops_per_s: float = 1.5e12  # C_C
    host_memory_bandwidth_bytes_per_s: float = 200e9  # B_D
    storage_read_bytes_per_s: float = 6e9
    storage_write_bytes_per_s: float = 4e9
    stage_prefill_tokens_per_s: float = 20000.0
    stage_decode_calls_per_s: float = 2000.0
    model: str = "qwen3-8b"
    noise_cv: float = 0.02
    n_samples: int = 20
    suites: tuple[str, ...] = ("gemm", "decode", "transfer", "moe", "storage", "stage")
    extra_notes: tuple[str, ...] = field(default=())

    @property
    def device(self) -> str:
        return "cuda:0" if self.gpu_name else "cpu"


CPU_MACHINE = SyntheticMachine(
    machine="synthetic-cpu", gpu_name=None, gpu_driver=None, peak_flops_per_s=2.0e12, peak_bytes_per_s=100e9,
    peak_source="synthetic: declared host peaks", dtype="fp32", decode_batches=(1, 4, 16, 64),
    decode_mbu=(0.20, 0.30, 0.40, 0.45), prefill_tokens=(32, 128, 512), prefill_mfu=(0.30, 0.45, 0.55),
    links=(("memcpy", "h2h", None, 2e-6, 10e9),), transfer_sizes=tuple(4096 * 4**k for k in range(8)),
    stage_prefill_tokens_per_s=40.0, stage_decode_calls_per_s=10.0, model="qwen3-8b",
    host_memory_bandwidth_bytes_per_s=80e9, cpu_expert_flops_per_s=1.0e12,
)


def _projections(model: str) -> dict[str, tuple[int, int]]:
    m = get_model(model)
    q, kv = m.n_heads * m.head_dim, m.n_kv_heads * m.head_dim
    return {"qkv": (m.hidden_size, q + 2 * kv), "o": (q, m.hidden_size),
            "gate_up": (m.hidden_size, 2 * m.intermediate_size), "down": (m.intermediate_size, m.hidden_size)}


def _cases(m: SyntheticMachine, rng: np.random.Generator):
    """(suite, case, dtype, params, Work kwargs, true time, peak kind) for every case of the machine."""
    eb = {"bf16": 2, "fp16": 2, "fp32": 4}.get(m.dtype, 2)
    if "gemm" in m.suites:
        for t, mfu in zip(m.prefill_tokens, m.prefill_mfu):
            for proj, (k, n) in _projections(m.model).items():
                flops = 2.0 * t * n * k
                yield ("gemm", f"{m.model}-{proj}-t{t}", m.dtype, GemmParams(model=m.model, projection=proj, tokens=t, m=t, n=n,
                       k=k).to_params(), {"useful_flops": flops, "useful_bytes": (t * k + k * n + t * n) * eb},
                       flops / (mfu * m.peak_flops_per_s))
    if "decode" in m.suites:
        weights = 16.4e9 if m.gpu_name else 0.5e9
        for b, mbu in zip(m.decode_batches, m.decode_mbu):
            nbytes = weights + b * m.decode_context * 147456.0 * (1 if m.gpu_name else 0.05)
            yield ("decode", f"step-b{b}-c{m.decode_context}", m.dtype, DecodeParams(model=m.model, kind="step", batch=b,
                   context_tokens=m.decode_context, mode="graph" if m.gpu_name else None).to_params(), {"useful_bytes": nbytes, "useful_flops": 2.0 * weights / eb * b}, nbytes / (mbu * m.peak_bytes_per_s))
    if "transfer" in m.suites:
        for link, direction, memory, alpha, bw in m.links:
            for s in m.transfer_sizes:
                params = TransferParams(link=link, direction=direction, size_bytes=s, memory=memory,
                                        bytes_counted="once").to_params()
                yield ("transfer", f"{link}-{direction}-{memory or 'any'}-{s}", "u8", params, {"useful_bytes": float(s)},
                       alpha + s / bw)
            # a chunked case, which the α–β fit must leave out
            s = 2 * 2**20
            yield ("transfer", f"{link}-{direction}-chunks72", "u8", TransferParams(link=link, direction=direction,
                   size_bytes=s, chunks=72, memory=memory, bytes_counted="once").to_params(), {"useful_bytes": float(s)},
                   72 * alpha + s / bw)
    if "moe" in m.suites:
        pe = 3 * 4096 * 1536  # Qwen3-235B-A22B routed expert
        for tok in (1, 16, 256):
            flops = 2.0 * tok * pe
            t = max(flops / m.cpu_expert_flops_per_s, pe * 2 / m.host_memory_bandwidth_bytes_per_s)
            yield ("moe", f"cpu-expert-t{tok}", "bf16", CpuExpertParams(tokens=tok, expert_params=pe,
                   expert_weight_bytes=pe * 2.0).to_params(),
                   {"useful_flops": flops, "useful_bytes": pe * 2.0}, t)
        for op, arrays in (("copy", 2), ("triad", 3)):
            nbytes = arrays * 8.0 * 2**27
            yield ("moe", f"stream-{op}", "fp64", HostBandwidthParams(op=op, array_bytes=8 * 2**27).to_params(),
                   {"useful_bytes": nbytes}, nbytes / m.host_memory_bandwidth_bytes_per_s)
    if "storage" in m.suites:
        for op, bw in (("read", m.storage_read_bytes_per_s), ("write", m.storage_write_bytes_per_s)):
            s = 256 * 2**20
            yield ("storage", f"seq-{op}-{s}", "u8", StorageParams(op=op, file_bytes=s, block_bytes=2**20, path="/tmp",
                   direct_io=True).to_params(),
                   {"useful_bytes": float(s)}, s / bw)
    if "stage" in m.suites:
        from harness.model.forward import decode_step_work, prefill_work

        md = get_model(m.model)
        pw, dw = prefill_work(md, 8192, 0, eb, eb), decode_step_work(md, 32, 8704, eb, eb)
        yield ("stage", f"{m.model}-prefill-t8192", m.dtype, StagePrefillParams(model=m.model, new_tokens=8192).to_params(),
               {"useful_flops": pw.flops, "useful_bytes": pw.bytes}, 8192 / m.stage_prefill_tokens_per_s)
        yield ("stage", f"{m.model}-decode-b32-c8704", m.dtype, StageDecodeParams(model=m.model, batch=32, context_tokens=8704).to_params(), {"useful_flops": dw.flops, "useful_bytes": dw.bytes}, 32 / m.stage_decode_calls_per_s)


def write_synthetic_run(results_dir: str | Path, m: SyntheticMachine, seed: int = 0, run_id: str | None = None) -> Path:
    """Write one synthetic micro run of machine `m` under results_dir/<machine>/<run_id>/ and return its path."""
    from harness.records import new_manifest
    from harness.store import RunWriter
    from microbench.case import CaseResult, Peak, Work
    from microbench.timing import TimingPolicy, measurement_from_samples

    rng = np.random.default_rng(seed)
    manifest = new_manifest(
        "micro", run_id=run_id or f"synthetic-{m.machine}-{seed:04d}", machine=m.machine, gpu_name=m.gpu_name,
        gpu_driver=m.gpu_driver, seeds={"numpy": seed}, command_line=["harness.calibration.synthetic", m.machine, str(seed)],
        notes=["synthetic run generated from known constants by harness.calibration.synthetic; not a measurement",
               *m.extra_notes],
        extra={"suites": list(m.suites), "synthetic": True, "constants": dataclasses.asdict(m)},
    )
    manifest = dataclasses.replace(manifest, host="synthetic", cpu_model=m.cpu_model, cpu_cores=2, cpu_cores_available=2,
                                   harness_commit=None, harness_dirty=None, created_unix_s=1.7e9 + seed)
    policy = TimingPolicy()
    peak = Peak(m.peak_flops_per_s, m.peak_bytes_per_s, m.peak_source)
    results = []
    host_peak = peak if m.gpu_name is None else Peak(None, None, "synthetic: host peaks not declared")
    for suite, case, dtype, params, work, t_true in _cases(m, rng):
        times = (t_true * np.exp(rng.normal(0.0, m.noise_cv, m.n_samples))).tolist()
        meas = measurement_from_samples(times, 1, "synthetic", policy)
        on_host = suite in ("moe", "storage")  # CPU experts, STREAM and file I/O run on the host
        results.append(CaseResult(suite, case, "synthetic", "cpu" if on_host else m.device, dtype, params, Work(**work),
                                  meas, host_peak if on_host else peak, source="synthetic"))
    with RunWriter(manifest, results_dir) as w:
        w.append("micro_cases", [r.to_row() for r in results])
        w.append("micro_samples", [row for r in results for row in r.sample_rows()])
    return w.path


def write_fixture_set(root: str | Path) -> list[Path]:
    """The committed report fixtures (tests/data/runs/): a synthetic H200 machine in two runs, and a CPU machine.

    Regenerate with `python -m harness.calibration.synthetic tests/data/runs` (deterministic: fixed seeds)."""
    gpu = SyntheticMachine(n_samples=12)
    return [
        write_synthetic_run(root, dataclasses.replace(gpu, suites=("gemm", "decode", "stage")), seed=1),
        write_synthetic_run(root, dataclasses.replace(gpu, suites=("transfer", "moe", "storage")), seed=2),
        write_synthetic_run(root, dataclasses.replace(CPU_MACHINE, n_samples=12), seed=3),
    ]


if __name__ == "__main__":
    import sys

    for p in write_fixture_set(sys.argv[1] if len(sys.argv) > 1 else "tests/data/runs"):
        print(p)
