#!/usr/bin/env bash
# The GPU check: build the device path, run the GPU tests, then the device benchmarks, and print
# a short table last. Meant for one run on a machine with an NVIDIA GPU (under 8 minutes on one
# H200), which may lack this project's build dependencies:
#
#   bash scripts/gpu-check.sh --prepare     # here: copies doctest and Google Benchmark into .gpu-deps/
#   bash scripts/gpu-check.sh [OUTDIR]      # there (carry .gpu-deps): build, test, benchmark
#   bash scripts/gpu-check.sh --build-only  # anywhere with nvcc: the same build, nothing run
#
# The build uses nvcc and CMake from the machine, only for its own GPU's architecture
# (CMAKE_CUDA_ARCHITECTURES=native; DCOMM_GPU_ARCH overrides). Results (logs, JSON) go to OUTDIR
# (default build-gpu/out).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DEPS=$ROOT/.gpu-deps

if [ "${1:-}" = "--prepare" ]; then
  rm -rf "$DEPS" && mkdir -p "$DEPS/include" "$DEPS/lib" "$DEPS/cmake"
  cp -r /usr/include/doctest /usr/include/benchmark "$DEPS/include/"
  cp -a /usr/lib/x86_64-linux-gnu/libbenchmark.so* /usr/lib/x86_64-linux-gnu/libbenchmark_main.a "$DEPS/lib/"
  # Minimal package configs pointing into .gpu-deps (the system ones name /usr paths).
  mkdir -p "$DEPS/cmake/doctest" "$DEPS/cmake/benchmark"
  cat >"$DEPS/cmake/doctest/doctestConfig.cmake" <<'EOF'
add_library(doctest::doctest INTERFACE IMPORTED)
set_target_properties(doctest::doctest PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${CMAKE_CURRENT_LIST_DIR}/../../include")
EOF
  cat >"$DEPS/cmake/benchmark/benchmarkConfig.cmake" <<'EOF'
get_filename_component(_gd "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)
add_library(benchmark::benchmark SHARED IMPORTED)
set_target_properties(benchmark::benchmark PROPERTIES IMPORTED_LOCATION "${_gd}/lib/libbenchmark.so.1.7.1"
  IMPORTED_SONAME libbenchmark.so.1debian INTERFACE_INCLUDE_DIRECTORIES "${_gd}/include")
add_library(benchmark::benchmark_main STATIC IMPORTED)
set_target_properties(benchmark::benchmark_main PROPERTIES IMPORTED_LOCATION "${_gd}/lib/libbenchmark_main.a"
  INTERFACE_LINK_LIBRARIES benchmark::benchmark)
set(benchmark_FOUND TRUE)
EOF
  du -sh "$DEPS"
  echo "gpu-check: dependencies copied to .gpu-deps (carry it to the GPU machine)"
  exit 0
fi

BUILD_ONLY=0
if [ "${1:-}" = "--build-only" ]; then BUILD_ONLY=1; shift; fi
OUT=${1:-$ROOT/build-gpu/out}
mkdir -p "$OUT"
BUILD=$ROOT/build-gpu
START=$(date +%s)
say() { echo "[gpu-check $(($(date +%s) - START))s] $*"; }

if [ $BUILD_ONLY = 0 ]; then
  if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
    say "no NVIDIA GPU here (nvidia-smi -L failed); nothing to check"
    exit 77
  fi
  nvidia-smi -L | tee "$OUT/gpu.txt"
fi
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$NVCC" ] || { say "no nvcc found"; exit 1; }

# 1. Build: the GPU tests, dcomm-bench and the kernel microbenchmarks, for this GPU (sm_90
# when only building).
ARCH=${DCOMM_GPU_ARCH:-native}
[ $BUILD_ONLY = 1 ] && ARCH=${DCOMM_GPU_ARCH:-90}
PREFIX=""
[ -d "$DEPS" ] && PREFIX="-DCMAKE_PREFIX_PATH=$DEPS/cmake"
export LD_LIBRARY_PATH="$DEPS/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
say "configuring ($NVCC)"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDCOMM_ENABLE_CUDA=ON \
  -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES="$ARCH" \
  -DDCOMM_BUILD_EXAMPLES=OFF $PREFIX >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
say "building"
cmake --build "$BUILD" --target test_gpu dcomm-bench dcomm-micro-kernel_bench -j "$(nproc)" >"$OUT/build.log" 2>&1 ||
  { grep -m 20 -B2 -A8 'error' "$OUT/build.log"; exit 1; }
if [ $BUILD_ONLY = 1 ]; then say "built (--build-only)"; exit 0; fi

# 2. The GPU tests (doctest: counts of test cases and assertions).
say "GPU tests"
(cd "$BUILD/tests" && timeout 300 ./test_gpu) >"$OUT/test_gpu.log" 2>&1
TEST_RC=$?
tail -4 "$OUT/test_gpu.log"
CASES=$(grep -E '^\[doctest\] test cases' "$OUT/test_gpu.log" | tail -1)
ASSERTS=$(grep -E '^\[doctest\] assertions' "$OUT/test_gpu.log" | tail -1)

# 3. Kernel microbenchmarks (bytes read + written per second) next to the device copy.
say "kernel benchmarks"
timeout 180 "$BUILD/bench/dcomm-micro-kernel_bench" --benchmark_format=json --benchmark_out="$OUT/kernels.json" \
  --benchmark_out_format=json --benchmark_min_time=0.2 >"$OUT/kernels.log" 2>&1

# 4. all_reduce on device memory, 2 and 4 ranks (threads: one CUDA context, so their kernels
# run together) sharing the GPU, 1 MiB .. 256 MiB.
for n in 2 4; do
  say "dcomm-bench all_reduce -t $n -g 1"
  timeout 180 "$BUILD/bench/dcomm-bench" all_reduce -t $n -g 1 -b 1M -e 256M -f 4 -n 20 -w 5 -c 1 \
    -J "$OUT/all_reduce_$n.json" >"$OUT/all_reduce_$n.log" 2>&1
  tail -8 "$OUT/all_reduce_$n.log"
done
for c in reduce_scatter all_gather broadcast send_recv; do
  timeout 60 "$BUILD/bench/dcomm-bench" $c -t 2 -g 1 -b 64M -e 64M -n 10 -w 3 -c 1 >"$OUT/${c}_2.log" 2>&1
done

# Tuning data: 2 ranks at 256 MiB with 1024 threads a block (the default is 512).
DCOMM_CUDA_THREADS=1024 timeout 60 "$BUILD/bench/dcomm-bench" all_reduce -t 2 -g 1 -b 256M -e 256M -n 20 -w 5 -c 1 \
  >"$OUT/all_reduce_2_t1024.log" 2>&1
# A processes run too (CUDA IPC; without MPS the two contexts take turns on the GPU).
timeout 60 "$BUILD/bench/dcomm-bench" all_reduce -N 2 -g 1 -b 64M -e 64M -n 5 -w 2 -c 1 >"$OUT/all_reduce_2_procs.log" 2>&1

# 5. The table, last.
python3 - "$OUT" "$TEST_RC" "$CASES" "$ASSERTS" <<'EOF'
import json, os, re, sys
out, rc, cases, asserts = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
print("\n== dcomm GPU check ==")
print(f"tests: exit {rc} ({'pass' if rc == 0 else 'FAIL'}); {cases.replace('[doctest] ', '')}; {asserts.replace('[doctest] ', '')}")
try:
    k = json.load(open(os.path.join(out, "kernels.json")))["benchmarks"]
    copy = {b["name"].split("/")[-2]: b["bytes_per_second"] for b in k if b["name"].startswith("BM_DeviceMemcpy/")}
    print(f"{'kernel (read+written)':28} {'4 MiB GB/s':>11} {'256 MiB GB/s':>13} {'vs copy @256M':>14}")
    rows = {}
    for b in k:
        if "error_occurred" in b and b["error_occurred"]:
            continue
        name, size = b["name"].rsplit("/", 2)[0], b["name"].split("/")[-2]  # BM_x[/case]/bytes/manual_time
        name = name.replace("BM_ReduceKernel/", "reduce ").replace("BM_", "")
        rows.setdefault(name, {})[size] = b["bytes_per_second"] / 1e9
    for name, v in rows.items():
        big = v.get(str(256 << 20), 0)
        ratio = big * 1e9 / copy.get(str(256 << 20), 1) if copy else 0
        print(f"{name:28} {v.get(str(4 << 20), 0):11.0f} {big:13.0f} {ratio:14.2f}")
except Exception as e:
    print("kernel benchmarks: no results (", e, ")")
for n in (2, 4):
    try:
        j = json.load(open(os.path.join(out, f"all_reduce_{n}.json")))
        cells = [f"{r['size'] >> 20}M {r['busbw']:.0f}" for r in j["results"] if not r["in_place"]]
        wrong = sum(r["wrong"] for r in j["results"])
        print(f"all_reduce {n} ranks on one GPU, busbw GB/s (out of place): {', '.join(cells)}; #wrong {wrong}")
    except Exception as e:
        print(f"all_reduce {n} ranks: no results ({e})")
for c, f in [(c, f"{c}_2.log") for c in ("reduce_scatter", "all_gather", "broadcast", "send_recv")] + [("all_reduce (2 processes)", "all_reduce_2_procs.log"), ("all_reduce (1024 threads)", "all_reduce_2_t1024.log")]:
    try:
        line = [l for l in open(os.path.join(out, f)) if re.match(r"^\s+\d+\s", l)][-1].split()
        print(f"{c} 2 ranks {int(line[0]) >> 20} MiB: {line[5]} us, busbw {line[7]} GB/s, #wrong {line[8]}")
    except Exception as e:
        print(f"{c}: no results")
EOF
say "done"
exit $TEST_RC
