#!/usr/bin/env bash
# Installs what dcomm-bench needs, builds it, and runs the all_reduce sweep (8 B to 256 MiB)
# over local ranks (2 by default; pass -N 4 etc.; any dcomm-bench flag is passed on).
# Only the benchmark on host memory: the compiler, CMake, Ninja and OpenSSL, and dcomm-bench
# alone, into build-bench/ (no CUDA, tests, adapters or examples), a few minutes on a fresh
# machine. Once the test command has built build/, its dcomm-bench (with CUDA where nvcc is:
# -g runs on GPUs) is the one run.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -f build/build.ninja ]; then
  cmake --build build --target dcomm-bench >/dev/null
  bench=build/bench/dcomm-bench
else
  bash scripts/install-deps.sh --bench
  cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCOMM_ENABLE_CUDA=OFF -DDCOMM_BUILD_TESTS=OFF \
    -DDCOMM_BUILD_EXAMPLES=OFF -DDCOMM_BUILD_TORCH=OFF -DDCOMM_BUILD_NCCL=OFF >/dev/null
  cmake --build build-bench --target dcomm-bench >/dev/null
  bench=build-bench/bench/dcomm-bench
fi
exec "$bench" all_reduce -b 8 -e 256M -f 4 "$@"
