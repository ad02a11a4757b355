"""The Chapter 19 suites in --quick form on the CPU: records, skips with reasons, the derived figures each case carries."""

import json

import pytest

from harness.store import Run

CH19 = ("precision", "mixed_step", "cuda_graphs", "allocator", "offload")


@pytest.fixture(scope="module")
def ch19_run(tmp_path_factory):
    from microbench.runner import run_micro

    out = tmp_path_factory.mktemp("results")
    s = run_micro(",".join(CH19), quick=True, out=out, device="cpu", command_line=["pytest"])
    run = Run(s.path)
    cases = run.table("micro_cases")
    cases["params"] = [json.loads(p) for p in cases["params_json"]]
    return s, run, cases, run.table("micro_skips")


def test_every_suite_recorded(ch19_run):
    s, run, cases, skips = ch19_run
    assert run.manifest.status == "complete" and set(cases["suite"]) == set(CH19)
    assert ((cases["useful_flops"] > 0) | (cases["useful_bytes"] > 0)).all() and (cases["median_s"] > 0).all()
    assert (skips["reason"].str.len() > 20).all()


def test_precision_dtypes_and_skips(ch19_run):
    _, _, cases, skips = ch19_run
    prec = cases[cases.suite == "precision"]
    assert {"fp32", "bf16"} <= set(prec["dtype"])
    assert {p["kind"] for p in prec["params"]} == {"gemm", "decode"}
    # the same shapes in each dtype: one GEMM and one decode case per dtype
    assert prec.groupby("dtype").size().to_dict() == {"bf16": 2, "fp32": 2}
    reasons = dict(zip(skips.case, skips.reason))
    assert "fp8" in reasons["torch-cpu-fp8"] and "fp16" in reasons["torch-cpu-fp16"]


def test_mixed_step_sweep_has_the_fit(ch19_run):
    _, _, cases, _ = ch19_run
    ms = cases[cases.suite == "mixed_step"]
    chunks = sorted(p["chunk_tokens"] for p in ms["params"])
    assert chunks[0] == 0 and len(chunks) >= 3
    p0 = ms["params"].iloc[0]
    base = ms[[p["chunk_tokens"] == 0 for p in ms["params"]]]["median_s"].iloc[0]
    assert p0["fit_base_step_s"] == pytest.approx(base)  # the fit is pinned to the measured decode step alone
    assert 0 <= p0["fit_hidden_tokens"] <= max(chunks) and p0["fit_per_token_s"] >= 0
    # the chunk's work is counted on top of the decode step: FLOPs grow with c, weights are read once
    ms = ms.assign(c=[p["chunk_tokens"] for p in ms["params"]]).sort_values("c")
    assert ms["useful_flops"].is_monotonic_increasing and ms["useful_flops"].iloc[-1] > ms["useful_flops"].iloc[0]


def test_cuda_graphs_stand_in_and_break_even(ch19_run):
    _, _, cases, skips = ch19_run
    cg = cases[cases.suite == "cuda_graphs"]
    graph = [p for p in cg["params"] if p["mode"] == "graph"]
    assert graph and all("torch.jit.trace" in p["mechanism"] for p in graph)
    for p in graph:
        assert p["capture_s"] > 0 and len(p["capture_samples_s"]) == 3
        assert p["saving_per_step_s"] == pytest.approx(p["eager_step_s"] - p["graph_step_s"])
        if p["saving_per_step_s"] > 0:
            assert p["break_even"]["break_even_steps"] == pytest.approx(p["capture_s"] / p["saving_per_step_s"])
        else:
            assert p["break_even"] is None and "no saving" in p["verdict"]
    assert "CUDA graphs need a GPU" in dict(zip(skips.case, skips.reason))["torch-cpu-cuda-graph"]


def test_allocator_compares_two_configs(ch19_run):
    _, _, cases, skips = ch19_run
    al = cases[cases.suite == "allocator"]
    by = {p["allocator"]: p for p in al["params"]}
    assert set(by) == {"glibc-default", "glibc-mmap-64k"}
    assert by["glibc-mmap-64k"]["env"]["MALLOC_MMAP_THRESHOLD_"] == "65536" and by["glibc-default"]["env"] == {}
    for p in by.values():
        assert 0 <= p["fragmentation_at_peak"] < 1 and p["peak_reserved_bytes"] > 0
        # the same seeded workload in both children: the live bytes it holds are identical
        assert p["peak_allocated_bytes"] == by["glibc-default"]["peak_allocated_bytes"]
    assert "cudaMallocAsync" in " ".join(skips.case)


def test_offload_measured_against_model(ch19_run):
    from harness.model.kv_prefetch import layer_pipeline

    _, _, cases, _ = ch19_run
    off = cases[cases.suite == "offload"]
    sched = {p["schedule"]: (p, m) for p, m in zip(off["params"], off["median_s"])}
    assert {"read-only", "compute-only", "read-then-compute", "per-layer"} <= set(sched)
    p, measured = sched["per-layer"]
    assert p["predicted_s"] == pytest.approx(layer_pipeline(p["layers"], p["read_s"], p["compute_s"]).total_s)
    assert p["measured_over_predicted"] == pytest.approx(measured / p["predicted_s"])
    # no bound on the ratio itself: on two shared cores a neighbour's burst during the compute-only timing moves it
    # tenfold (seen: 0.10); the ratio is the measurement, the test checks it is derived from the stored times
    assert p["measured_over_predicted"] > 0


def test_ch19_report_renders_every_section(ch19_run, tmp_path):
    from harness.report.ch19 import render

    s, run, _, _ = ch19_run
    md, page = render(run.path, tmp_path / "rep")
    text = md.read_text()
    for head in ("## 1. Precision", "## 2. KV dtype", "## 3. Chunked prefill", "## 4. CUDA graphs", "## 5. Allocator",
                 "## 6. KV offload", "## 7. SLO-driven tuning"):
        assert head in text
    assert "| bf16 | 147456 | 1.125 | 20.7 | 4.55 (decode" in text  # the chapter's plan in the KV-dtype table
    assert "No sweep runs" in text and page.read_text().startswith("<!doctype html>")


torch = pytest.importorskip("torch")
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; the CPU stand-ins are tested above")


@pytest.mark.gpu
@needs_gpu
def test_ch19_suites_on_gpu(tmp_path):
    from microbench.runner import run_micro

    s = run_micro(",".join(CH19), quick=True, out=tmp_path, device="cuda", budget_s=0.05)
    got = {c["suite"] for c in s.cases if c["device"].startswith("cuda")}
    assert got == set(CH19)
    graph = [c for c in s.cases if c["suite"] == "cuda_graphs" and c["params"].get("mode") == "graph"]
    assert all("CUDAGraph" in c["params"]["mechanism"] for c in graph)
    alloc = {c["params"]["allocator"] for c in s.cases if c["suite"] == "allocator"}
    assert {"native", "cudaMallocAsync"} <= alloc
