"""run_llama_cpp_micro with backend "cuda" (the device loop's kernels step), with the stand-in tools printing the
committed real outputs: every layer offloaded, the kernels timed on CUDA0, the cases of family ggml-<type>-cuda, the
GPU naming the run's machine; and the step-time fit reads that family back."""

from __future__ import annotations

import json

import pytest

from harness.calibration.step_time import points_from_runs
from harness.errors import HarnessError
from harness.store import Run
from microbench.llama_cpp import backend_ops
from microbench.llama_cpp import run as llrun
from tests.microbench.llama_cpp.test_llama_cpp_run import DATA, TINY, _tool, fake_bin, tiny_gguf  # noqa: F401 - fixtures


def test_cuda_backend_offloads_every_layer_and_labels_the_family(fake_bin, tiny_gguf, tmp_path):
    envf = tmp_path / "env.json"
    _tool(fake_bin, "llama-batched-bench", "import json, os\n"
          f"json.dump({{'ngl': os.environ.get('LLAMA_ARG_N_GPU_LAYERS')}}, open({str(envf)!r}, 'w'))\n"
          f"sys.stdout.write(open({str(DATA / 'batched_bench.jsonl')!r}).read())")
    res = llrun.run_llama_cpp_micro(tiny_gguf, threads=8, out=tmp_path / "results", sweep=TINY, repack=False,
                                    which=("batched", "ops", "bench"), backend="cuda", gpu_name="NVIDIA H100 80GB HBM3")
    run = Run(res.path)
    info = run.manifest.extra["llama_cpp"]
    assert info["model"]["family"] == "ggml-q8_0-cuda" and run.manifest.extra["device"] == "cuda"
    assert info["settings"]["n_gpu_layers"] == "all" and json.loads(envf.read_text())["ngl"] == "all"
    assert "-b CUDA0" in info["commands"]["test-backend-ops"][0] and "-ngl 99" in info["commands"]["llama-bench"][0]
    assert "h100" in run.manifest.machine.lower()
    cases = run.table("micro_cases")
    ops = cases[cases["suite"] == "llama_cpp_ops"]
    assert set(ops["device"]) == {"cuda"} and set(cases["device"]) == {"cuda"}
    assert all(json.loads(p)["family"].endswith("-cuda") for p in ops["params_json"])
    # the engine's step-time fit takes the family and the kernels' constants from the run
    points, _, facts = points_from_runs(res.path)
    assert facts["family"] == "ggml-q8_0-cuda" and facts["threads"] == 8 and points
    assert {k["family"] for k in facts["kernels"]} >= {"ggml-q8_0-cuda"}


def test_backend_ops_cases_take_the_backend_they_ran_on():
    text = (DATA / "test_backend_ops_mul_mat.sql").read_text()
    cs = backend_ops.cases([text], threads=8, backend="cuda")
    assert {c.params["family"].rsplit("-", 1)[1] for c in cs} == {"cuda"} and {c.device for c in cs} == {"cuda"}
    assert backend_ops.perf_args("f.txt", backend="CUDA0")[:3] == ["perf", "-b", "CUDA0"]


def test_an_unknown_backend_is_refused(fake_bin, tiny_gguf, tmp_path):
    with pytest.raises(HarnessError, match="backend 'rocm'.*cpu or cuda"):
        llrun.run_llama_cpp_micro(tiny_gguf, threads=2, out=tmp_path, sweep=TINY, backend="rocm")
