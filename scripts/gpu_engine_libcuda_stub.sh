#!/usr/bin/env bash
# A libcuda stub to link llama.cpp's CUDA backend on a machine without the NVIDIA driver: every driver function that
# cuda.h declares (after its macros pick the versioned names, e.g. cuMemAlloc -> cuMemAlloc_v2), as an empty symbol, in
# a shared library with the driver's soname libcuda.so.1. Only for linking: the device's real driver library is what
# the binaries load. Usage: scripts/gpu_engine_libcuda_stub.sh OUT_DIR [CUDA_HOME]   (writes OUT_DIR/libcuda.so)
set -euo pipefail
OUT="${1:?usage: scripts/gpu_engine_libcuda_stub.sh OUT_DIR [CUDA_HOME]}"
CUDA_HOME="${2:-${CUDA_HOME:-/usr/local/cuda}}"
[ -f "$CUDA_HOME/include/cuda.h" ] || { echo "error: $CUDA_HOME/include/cuda.h not found; give CUDA_HOME (the CUDA 13 toolkit)" >&2; exit 1; }
mkdir -p "$OUT"
echo | gcc -E -I"$CUDA_HOME/include" -include cuda.h - | grep -oE "\bCUresult +cu[A-Za-z0-9_]+ *\(" \
  | sed -E 's/CUresult +//; s/ *\(//' | sort -u | sed 's/.*/void &(void) {}/' > "$OUT/libcuda_stub.c"
gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$OUT/libcuda.so" "$OUT/libcuda_stub.c"
echo "$OUT/libcuda.so: $(wc -l < "$OUT/libcuda_stub.c") driver functions"
