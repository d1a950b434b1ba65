#!/usr/bin/env bash
# The GPU check: correctness first (each GPU test case on its own, with its own limit and its
# duration printed; the processes case last), then the device benchmarks and tuning rows, and a
# short table printed last, also when the check is killed. Meant for one call on a lent GPU
# machine (one H200: about 4 minutes with prebuilt binaries), which has nvcc, CMake and ninja
# but not this project's test and benchmark libraries, and brings back only a few files.
#
#   bash scripts/gpu-check.sh --build-only   # here, no GPU needed: builds for sm_90 (DCOMM_GPU_ARCH)
#                                            # into .gpu-bin/ (ignored by git: carry it)
#   bash scripts/gpu-check.sh OUTDIR         # there: runs .gpu-bin's binaries (builds there when
#                                            # they are missing or do not start), writes
#                                            # OUTDIR/gpu-check.tar.gz (every log and JSON) and
#                                            # OUTDIR/table.txt; the table also goes to stdout
#   bash scripts/gpu-check.sh --prepare      # here: copies doctest and Google Benchmark into
#                                            # .gpu-deps/, for building on the GPU machine
#
# One time budget for everything, the build included: DCOMM_GPU_CHECK_BUDGET_S (default 480);
# each step runs under the smaller of its cap and what is left, and a step that no longer fits
# is skipped and named in the table. Core dumps are off. With the device tool:
#   run(command="bash scripts/gpu-check.sh $OUT", carry=[".gpu-bin"], timeout_s=540)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BIN=$ROOT/.gpu-bin
DEPS=$ROOT/.gpu-deps
# shellcheck source=lib/check-steps.sh
source "$ROOT/scripts/lib/check-steps.sh"

die() {
  echo "gpu-check: $*" >&2
  exit 1
}

prepare() {
  rm -rf "$DEPS" && mkdir -p "$DEPS/include" "$DEPS/lib" "$DEPS/cmake/doctest" "$DEPS/cmake/benchmark"
  [ -d /usr/include/doctest ] || die "doctest is not installed here (apt-get install doctest-dev)"
  cp -r /usr/include/doctest "$DEPS/include/"
  if [ -d /usr/include/benchmark ]; then
    cp -r /usr/include/benchmark "$DEPS/include/"
    cp -a /usr/lib/x86_64-linux-gnu/libbenchmark.so* /usr/lib/x86_64-linux-gnu/libbenchmark_main.a "$DEPS/lib/"
    cat >"$DEPS/cmake/benchmark/benchmarkConfig.cmake" <<'EOF'
get_filename_component(_gd "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)
file(GLOB _lib "${_gd}/lib/libbenchmark.so.[0-9]*.[0-9]*")
add_library(benchmark::benchmark SHARED IMPORTED)
set_target_properties(benchmark::benchmark PROPERTIES IMPORTED_LOCATION "${_lib}"
  IMPORTED_SONAME libbenchmark.so.1debian INTERFACE_INCLUDE_DIRECTORIES "${_gd}/include")
add_library(benchmark::benchmark_main STATIC IMPORTED)
set_target_properties(benchmark::benchmark_main PROPERTIES IMPORTED_LOCATION "${_gd}/lib/libbenchmark_main.a"
  INTERFACE_LINK_LIBRARIES benchmark::benchmark)
set(benchmark_FOUND TRUE)
EOF
  fi
  cat >"$DEPS/cmake/doctest/doctestConfig.cmake" <<'EOF'
add_library(doctest::doctest INTERFACE IMPORTED)
set_target_properties(doctest::doctest PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${CMAKE_CURRENT_LIST_DIR}/../../include")
EOF
  du -sh "$DEPS"
  echo "gpu-check: build dependencies copied to .gpu-deps (carry it to build on the GPU machine)"
}

# Builds every binary the check runs, each target on its own (a missing benchmark library
# costs the kernel benchmarks, not the tests), and copies them with the shared libraries they
# need into .gpu-bin. Optional transports are left out: the binaries need only the CUDA driver.
build() {
  local arch=$1 build=$ROOT/build-gpu
  command -v cmake >/dev/null || die "cmake is not installed: it is needed to build the check's binaries"
  local nvcc
  nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  [ -x "$nvcc" ] || die "no nvcc (on PATH or /usr/local/cuda/bin): the CUDA toolkit is needed to build"
  local gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  local prefix=()
  [ -d "$DEPS" ] && prefix=(-DCMAKE_PREFIX_PATH="$DEPS/cmake")
  if [ ! -d /usr/include/doctest ] && [ ! -d "$DEPS/include/doctest" ]; then
    die "doctest is missing here: run 'bash scripts/gpu-check.sh --prepare' where it is installed and carry .gpu-deps"
  fi
  mkdir -p "$build"
  echo "gpu-check: configuring build-gpu for CUDA architecture $arch ($nvcc)"
  cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DDCOMM_ENABLE_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" -DDCOMM_BUILD_EXAMPLES=OFF -DDCOMM_WITH_UCX=OFF -DDCOMM_WITH_VERBS=OFF \
    -DDCOMM_WITH_HWLOC=OFF "${prefix[@]}" >"$build/configure.log" 2>&1 || { tail -30 "$build/configure.log"; die "configure failed"; }
  rm -rf "$BIN" && mkdir -p "$BIN/lib"
  local t built=()
  for t in test_gpu dcomm-bench dcomm-micro-kernel_bench dcomm_nccl nccl_local_test; do
    if cmake --build "$build" --target "$t" -j "$(nproc)" >"$build/build-$t.log" 2>&1; then
      built+=("$t")
    else
      echo "gpu-check: building $t failed:"
      grep -m 10 -B2 -A6 -E 'error|unknown target' "$build/build-$t.log" | head -40
      [ "$t" = test_gpu ] && die "the GPU tests did not build"
    fi
  done
  for t in "${built[@]}"; do
    find "$build" -type f -name "$t" -perm -u+x -exec cp {} "$BIN/" \;
  done
  # dcomm's libnccl.so.2 (its tests find it through LD_LIBRARY_PATH=$BIN/lib there).
  cp -a "$build"/nccl/libnccl.so* "$BIN/lib/" 2>/dev/null
  # Shared libraries the binaries need that a CUDA machine may not have (Google Benchmark).
  for f in "$BIN"/*; do
    [ -f "$f" ] || continue
    ldd "$f" 2>/dev/null | awk '/libbenchmark/ { print $3 }' | while read -r lib; do cp -L "$lib" "$BIN/lib/"; done
  done
  {
    echo "built: $(date -u +%FT%TZ) on $(hostname) for sm_$arch"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
    echo "binaries: ${built[*]}"
  } >"$BIN/MANIFEST"
  du -sh "$BIN"
  cat "$BIN/MANIFEST"
}

case "${1:-}" in
  --prepare) prepare; exit ;;
  --build-only) build "${DCOMM_GPU_ARCH:-90}"; exit ;;
  --build-native) build "${DCOMM_GPU_ARCH:-native}"; exit ;;
esac

OUT=${1:-$ROOT/build-gpu/out}
ulimit -c 0
# The GPU, its driver and compute mode first: a GPU in exclusive-process mode refuses two
# ranks' contexts, which explains a failure below before anyone reads it.
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: no NVIDIA GPU here (nvidia-smi -L failed); nothing to check"
  exit 77
fi
nvidia-smi --query-gpu=name,driver_version,compute_mode,mig.mode.current,memory.total,clocks.max.sm,persistence_mode \
  --format=csv 2>&1 | tee "$OUT.gpu.txt"

CS_ARCHIVE=gpu-check
CS_SUMMARY="python3 $ROOT/scripts/lib/gpu_summary.py"
cs_init "$OUT" "${DCOMM_GPU_CHECK_BUDGET_S:-480}"
cp "$OUT.gpu.txt" "$CS_WORK/gpu.txt" && rm -f "$OUT.gpu.txt"
export LD_LIBRARY_PATH="$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# 1. Binaries: the prebuilt ones if they start here, else built here for this GPU.
if "$BIN/test_gpu" --list-test-cases >"$CS_WORK/probe.log" 2>&1; then
  cs_record binaries prebuilt 0 "$(head -1 "$BIN/MANIFEST" 2>/dev/null)"
else
  cs_say "prebuilt binaries missing or not starting ($(tail -1 "$CS_WORK/probe.log" 2>/dev/null)); building here"
  cs_step build 300 60 bash "$ROOT/scripts/gpu-check.sh" --build-native || exit 1
fi
TEST=$BIN/test_gpu
BENCH=$BIN/dcomm-bench
cp "$BIN/MANIFEST" "$CS_WORK/" 2>/dev/null

# 2. Correctness: every GPU test case alone, the processes case last.
"$TEST" --list-test-cases 2>/dev/null | awk '/^=+$/ { sep++; next } sep == 1' >"$CS_WORK/cases.txt"
grep -v 'processes' "$CS_WORK/cases.txt" >"$CS_WORK/order.txt"
grep 'processes' "$CS_WORK/cases.txt" >>"$CS_WORK/order.txt"
i=0
while IFS= read -r name; do
  i=$((i + 1))
  cap=60
  case $name in *"every type, op and collective"* | *processes*) cap=180 ;; esac
  # doctest filters split at commas: '?' matches one character, the comma included.
  cs_step "test$(printf %02d $i)" $cap 15 "$TEST" "--test-case=${name//,/?}" --duration=true
  rc=$?
  cs_note "test$(printf %02d $i): $name"
  if ((rc == 77)); then  # the binary found no usable device although nvidia-smi did: stop here
    cs_note "the GPU tests see no usable CUDA device (driver older than the CUDA runtime they were built with?)"
    exit 1
  fi
done <"$CS_WORK/order.txt"

# 2b. dcomm's libnccl.so.2 on device memory: 2 ranks on the GPU through the NCCL API (every
# collective, PreMulSum with a device scalar, a CUDA graph replayed).
if [ -x "$BIN/nccl_local_test" ] && [ -f "$BIN/lib/libnccl.so.2" ]; then
  cs_step nccl_device 60 15 "$BIN/nccl_local_test" device
else
  cs_record nccl_device skipped 0 "dcomm's libnccl.so.2 or nccl_local_test was not built"
fi
# nccl-tests, when a checkout built with make is at NCCL_TESTS_DIR: its *_perf -c 1 on one GPU
# through dcomm (LD_PRELOAD) and through the real NCCL of the pip wheel, one rank each (real NCCL
# refuses two ranks on one GPU).
NCCL_TESTS_BIN=${NCCL_TESTS_DIR:+$NCCL_TESTS_DIR/build}
if [ -n "$NCCL_TESTS_BIN" ] && [ -x "$NCCL_TESTS_BIN/all_reduce_perf" ]; then
  REAL_NCCL=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2>/dev/null)
  for p in all_reduce all_gather reduce_scatter broadcast; do
    cs_step "nccltests_${p}_dcomm" 45 10 env LD_PRELOAD="$BIN/lib/libnccl.so.2" "$NCCL_TESTS_BIN/${p}_perf" -b 64M -e 256M -f 2 -g 1 -c 1 -n 20 -w 5
    [ -n "$REAL_NCCL" ] && cs_step "nccltests_${p}_nccl" 45 10 env LD_LIBRARY_PATH="$REAL_NCCL" "$NCCL_TESTS_BIN/${p}_perf" -b 64M -e 256M -f 2 -g 1 -c 1 -n 20 -w 5
  done
else
  cs_record nccl_tests skipped 0 "NCCL_TESTS_DIR is not set to a built nccl-tests checkout"
fi

# 3. Kernel microbenchmarks: bytes read + written per second, next to the device copy.
if [ -x "$BIN/dcomm-micro-kernel_bench" ]; then
  cs_step kernels 90 20 "$BIN/dcomm-micro-kernel_bench" --benchmark_format=json \
    --benchmark_out="$CS_WORK/kernels.json" --benchmark_out_format=json --benchmark_min_time=0.2
else
  cs_record kernels skipped 0 "dcomm-micro-kernel_bench was not built (no Google Benchmark)"
fi

# 4. Collectives on device memory: ranks as threads of one process (one CUDA context, so
# their kernels run together) sharing the GPU.
for n in 2 4; do
  cs_step "all_reduce_$n" 60 15 "$BENCH" all_reduce -t $n -g 1 -b 1M -e 256M -f 4 -n 20 -w 5 -c 1 -J "$CS_WORK/all_reduce_$n.json"
done
for c in reduce_scatter all_gather broadcast send_recv; do
  cs_step "${c}_2" 30 10 "$BENCH" $c -t 2 -g 1 -b 64M -e 64M -n 10 -w 3 -c 1 -J "$CS_WORK/${c}_2.json"
done

# 5. The torch backend on CUDA tensors (torch 2.x, the machine's pip torch): dcomm_torch built
# here against it, then 2 ranks on the one GPU under torchrun (collectives, stream order,
# futures, and DDP for a few steps against Gloo on the CPU; tests/torch/backend_checks.py gpu).
if python3 -c "import torch; assert torch.cuda.is_available() and torch.__version__ >= '2'" 2>/dev/null; then
  TORCH_PKG=$CS_WORK/torch-pkg
  cs_step torch_build 240 60 env DCOMM_TORCH_CUDA=1 MAX_JOBS="$(nproc)" bash -c \
    "cd '$ROOT/python' && python3 setup.py -q build_ext -b '$TORCH_PKG' -t '$CS_WORK/torch-tmp' && cp dcomm_torch/__init__.py '$TORCH_PKG/dcomm_torch/'"
  if [ -f "$TORCH_PKG/dcomm_torch/__init__.py" ]; then
    cs_step torch_ddp_2 120 30 env PYTHONPATH="$TORCH_PKG" DCOMM_TORCH_TEST_TIMEOUT_S=60 python3 -m torch.distributed.run \
      --standalone --nproc_per_node 2 "$ROOT/tests/torch/backend_checks.py" gpu
  fi
else
  cs_record torch skipped 0 "python3 here has no CUDA torch 2.x"
fi

# 6. Tuning rows: 2 ranks, 256 MiB all_reduce, one setting changed at a time.
tune() {
  local name=$1
  shift
  cs_step "tune_$name" 30 10 env "$@" "$BENCH" all_reduce -t 2 -g 1 -b 256M -e 256M -n 20 -w 5 -c 1 \
    -J "$CS_WORK/tune_$name.json"
}
tune channels16 DCOMM_CUDA_CHANNELS=16
tune channels32 DCOMM_CUDA_CHANNELS=32
tune threads256 DCOMM_CUDA_THREADS=256
tune slot128k DCOMM_CUDA_SLOT_BYTES=128K
tune slot1m DCOMM_CUDA_SLOT_BYTES=1M
tune slots8 DCOMM_CUDA_SLOTS=8

# 7. Processes (CUDA IPC; without MPS their contexts take turns on the GPU).
cs_step all_reduce_2_procs 45 15 "$BENCH" all_reduce -N 2 -g 1 -b 64M -e 64M -n 5 -w 2 -c 1 -J "$CS_WORK/all_reduce_2_procs.json"

# The table (and the archive) come from the EXIT trap.
grep -q $'\tFAIL\t\|\tTIMEOUT\t' "$CS_RESULTS" && exit 1
exit 0
