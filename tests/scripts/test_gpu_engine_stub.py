"""scripts/gpu_engine_libcuda_stub.sh: the libcuda stub `make gpu-engine` links llama.cpp's CUDA backend against."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT

CUDA = Path("/usr/local/cuda")
pytestmark = pytest.mark.skipif(not (CUDA / "include" / "cuda.h").is_file() or shutil.which("gcc") is None,
                                reason="needs the CUDA toolkit's cuda.h in /usr/local/cuda and gcc (the build machine's)")


def test_the_stub_has_the_driver_soname_and_the_functions_ggml_cuda_calls(tmp_path):
    p = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_engine_libcuda_stub.sh"), str(tmp_path)], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    lib = tmp_path / "libcuda.so"
    assert "SONAME" in (d := subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True).stdout)
    assert "[libcuda.so.1]" in d
    syms = set(subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True).stdout.split())
    # the driver calls of ggml-cuda (VMM pool, device attributes, errors), in their versioned names where cuda.h renames
    for f in ("cuMemCreate", "cuMemMap", "cuMemUnmap", "cuMemRelease", "cuMemSetAccess", "cuMemAddressReserve",
              "cuMemAddressFree", "cuMemGetAllocationGranularity", "cuDeviceGet", "cuDeviceGetAttribute",
              "cuGetErrorString", "cuMemAlloc_v2"):
        assert f in syms, f
    assert "cuMemAlloc" not in syms  # the header's macro picks the _v2 name; code compiled against it calls that


def test_a_missing_toolkit_is_named(tmp_path):
    p = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_engine_libcuda_stub.sh"), str(tmp_path), str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "cuda.h not found" in p.stderr
