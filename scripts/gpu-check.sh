#!/usr/bin/env bash
# The GPU check: everything dcomm knows to ask of a GPU, in order of value, within one time
# budget (DCOMM_GPU_CHECK_BUDGET_S, default 300 s, probe to archive): the GPU test cases each
# alone, dcomm's libnccl.so.2 on device memory, the 2-rank all_reduce table with a device copy
# of each size beside it (the ceiling), the tuning rows, 2 processes, the kernel benchmarks,
# the other collectives, and last the torch backend on CUDA tensors. A short table is printed
# last, also when the check is killed; every step's log is line-buffered, runs with a
# DCOMM_TIMEOUT_MS under its cap (a stuck kernel names its peer and channel before the step is
# killed), and is followed by what was still on the GPU when it failed.
#
#   bash scripts/gpu-check.sh --build-only   # no GPU needed: builds for sm_90 (DCOMM_GPU_ARCH)
#                                            # into .gpu-bin/ (ignored by git), with the shared
#                                            # libraries a bare CUDA image lacks and the torch
#                                            # backend's compiled core (torch 2.11's headers)
#   bash scripts/gpu-check.sh --configure-only  # no GPU needed, seconds: build-gpu configures
#                                            # and has every target --build-only builds (CI)
#   bash scripts/gpu-check.sh --dry-run      # no GPU needed: every step, its cap, the total
#   bash scripts/gpu-check.sh OUTDIR         # on the GPU machine: runs .gpu-bin's binaries and
#                                            # writes OUTDIR/table.txt and OUTDIR/gpu-check.tar.gz
#                                            # (logs and JSON, no build trees)
#   bash scripts/gpu-check.sh --prepare      # copies doctest and Google Benchmark into .gpu-deps/,
#                                            # for building on the GPU machine when .gpu-bin is
#                                            # missing or stale (the fallback: 3-5 minutes)
#
# Inputs there: .gpu-bin (and .gpu-deps for the fallback), python3 with a CUDA torch 2.x for
# the last steps. Core dumps are off.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BIN=$ROOT/.gpu-bin
DEPS=$ROOT/.gpu-deps
TORCH_VERSION=2.11.0  # the torch of the GPU machine, whose headers the prebuilt core is compiled against
# shellcheck source=lib/check-steps.sh
source "$ROOT/scripts/lib/check-steps.sh"

die() {
  echo "gpu-check: $*" >&2
  exit 1
}

# What the binaries were built from: one hash over the sources (no .git needed where it runs).
sources_hash() {
  find include tests bench nccl python/dcomm_torch/csrc CMakeLists.txt -type f \
    \( -name '*.hpp' -o -name '*.cuh' -o -name '*.cpp' -o -name '*.cu' -o -name '*.h' -o -name CMakeLists.txt \) \
    2>/dev/null | LC_ALL=C sort | xargs cat | sha256sum | cut -c1-16
}

prepare() {
  rm -rf "$DEPS" && mkdir -p "$DEPS/include" "$DEPS/lib" "$DEPS/cmake/doctest" "$DEPS/cmake/benchmark"
  [ -d /usr/include/doctest ] || die "doctest is not installed here (apt-get install doctest-dev)"
  cp -r /usr/include/doctest "$DEPS/include/"
  # OpenSSL's headers and libcrypto, for find_package(OpenSSL) there (-DOPENSSL_ROOT_DIR).
  [ -d /usr/include/openssl ] && cp -r /usr/include/openssl "$DEPS/include/" &&
    cp -r /usr/include/x86_64-linux-gnu/openssl "$DEPS/include/" 2>/dev/null
  cp -a /usr/lib/x86_64-linux-gnu/libcrypto.so* "$DEPS/lib/" 2>/dev/null
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

# The shared libraries a binary needs beyond glibc, the compiler's runtime and the CUDA driver
# (a bare Ubuntu 24.04 CUDA image has those, and newer): copied beside the binaries.
bundle_libs() {
  local f lib
  for f in "$@"; do
    ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | while read -r lib; do
      case $(basename "$lib") in
        libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | ld-linux* | libstdc++.so* | libgcc_s.so* | \
          libcuda.so* | libnvidia* | libnccl.so*) ;;
        *) [ -e "$BIN/lib/$(basename "$lib")" ] || cp -L "$lib" "$BIN/lib/" ;;
      esac
    done
  done
}

# The binaries the check runs, in the order they are built.
TARGETS=(test_gpu dcomm-bench dcomm-micro-kernel_bench dcomm_nccl nccl_local_test nccl_api_2_30_test
  dcomm-device-one-sided-bench)

# Configures build-gpu for the architecture: CUDA on, the optional transports off (the GPU
# machine has neither UCX nor verbs), no examples.
configure() {
  local arch=$1 build=$ROOT/build-gpu
  command -v cmake >/dev/null || die "cmake is not installed: it is needed to build the check's binaries"
  local nvcc
  nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  [ -x "$nvcc" ] || die "no nvcc (on PATH or /usr/local/cuda/bin): the CUDA toolkit is needed to build"
  local gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  local prefix=()
  [ -d "$DEPS" ] && prefix=(-DCMAKE_PREFIX_PATH="$DEPS/cmake" -DOPENSSL_ROOT_DIR="$DEPS")
  if [ ! -d /usr/include/doctest ] && [ ! -d "$DEPS/include/doctest" ]; then
    die "doctest is missing here: run 'bash scripts/gpu-check.sh --prepare' where it is installed and carry .gpu-deps"
  fi
  mkdir -p "$build"
  echo "gpu-check: configuring build-gpu for CUDA architecture $arch ($nvcc)"
  cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DDCOMM_ENABLE_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" -DDCOMM_BUILD_EXAMPLES=OFF -DDCOMM_WITH_UCX=OFF -DDCOMM_WITH_VERBS=OFF \
    -DDCOMM_WITH_HWLOC=OFF "${prefix[@]}" >"$build/configure.log" 2>&1 || { tail -30 "$build/configure.log"; die "configure failed"; }
}

# What CI checks without compiling the CUDA code twice (the main build compiles it): build-gpu
# configures, and it has every target the check builds.
configure_only() {
  configure "$1"
  local have t missing=()
  have=$(cmake --build "$ROOT/build-gpu" --target help 2>/dev/null)
  for t in "${TARGETS[@]}"; do
    grep -qE "(^|[ /])$t(:| |$)" <<<"$have" || missing+=("$t")
  done
  ((${#missing[@]} == 0)) || die "build-gpu has no target ${missing[*]}: update TARGETS in scripts/gpu-check.sh"
  echo "gpu-check: build-gpu configures for sm_$1 with every target the check builds: ${TARGETS[*]}"
}

# Builds every binary the check runs, each target on its own (a missing benchmark library
# costs the kernel benchmarks, not the tests), and copies them, stripped, with the shared
# libraries they need into .gpu-bin.
build() {
  local arch=$1 build=$ROOT/build-gpu
  configure "$arch"
  local keep_torch=""
  [ -d "$BIN/torch" ] && keep_torch=$(mktemp -d) && mv "$BIN/torch" "$keep_torch/"
  rm -rf "$BIN" && mkdir -p "$BIN/lib"
  [ -n "$keep_torch" ] && mv "$keep_torch/torch" "$BIN/" && rmdir "$keep_torch"
  local t built=()
  for t in "${TARGETS[@]}"; do
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
  find "$BIN" -maxdepth 1 -type f -perm -u+x -exec strip --strip-unneeded {} \; 2>/dev/null
  bundle_libs "$BIN"/* "$BIN"/lib/libnccl.so.2
  {
    echo "built: $(date -u +%FT%TZ) on $(hostname) for sm_$arch"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
    echo "sources: $(sources_hash)"
    echo "binaries: ${built[*]}"
    echo "libraries: $(cd "$BIN/lib" && ls | tr '\n' ' ')"
  } >"$BIN/MANIFEST"
}

# The torch backend's C++ and CUDA sources that need no Python (every .cpp but module.cpp,
# cuda_path.cpp, device_glue.cu), compiled against torch $TORCH_VERSION's headers into
# .gpu-bin/torch/libdcomm_torch_core.a (tests/torch/torch2_compile.sh --archive does it, and
# the torch2_compile test shares its work); the GPU machine compiles only module.cpp against
# its Python and links. Skipped, with a line, without the wheel (no network).
build_torch_core() {
  local cache=${DCOMM_TORCH2_CACHE:-$ROOT/build/torch2}
  if DCOMM_TORCH2_VERSION=$TORCH_VERSION bash "$ROOT/tests/torch/torch2_compile.sh" --archive "$ROOT/build"; then
    mkdir -p "$BIN/torch" && cp "$cache/libdcomm_torch_core.a" "$BIN/torch/"
    echo "torch core: against torch $TORCH_VERSION's headers, $(du -h "$BIN/torch/libdcomm_torch_core.a" | cut -f1)" >>"$BIN/MANIFEST"
  else
    echo "torch core: not built (see above); the GPU machine builds the whole backend" >>"$BIN/MANIFEST"
  fi
}

case "${1:-}" in
  --prepare) prepare; exit ;;
  --build-only)
    build "${DCOMM_GPU_ARCH:-90}"
    build_torch_core
    du -sh "$BIN"
    cat "$BIN/MANIFEST"
    exit ;;
  --configure-only) configure_only "${DCOMM_GPU_ARCH:-90}"; exit ;;
  --build-native) build "${DCOMM_GPU_ARCH:-native}"; exit ;;
  --dry-run) export CS_DRY_RUN=1 ;;
esac

OUT=${1:-$ROOT/build-gpu/out}
[ "$OUT" = --dry-run ] && OUT=$(mktemp -d)
ulimit -c 0
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1  # a crash in Python prints where it was
CS_ONLY=${DCOMM_GPU_CHECK_STEPS:-}  # a regex: only those steps (a rerun of what failed)
export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-32}  # thread ranks each have a stream
if [ "${CS_DRY_RUN:-0}" != 1 ]; then
  # The GPU, its driver and compute mode first: a GPU in exclusive-process mode refuses two
  # ranks' contexts, which explains a failure below before anyone reads it.
  if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu-check: no NVIDIA GPU here (nvidia-smi -L failed); nothing to check (--dry-run lists the steps)"
    exit 77
  fi
  nvidia-smi --query-gpu=name,driver_version,compute_mode,mig.mode.current,memory.total,clocks.max.sm,persistence_mode \
    --format=csv 2>&1 | tee "$OUT.gpu.txt"
fi

CS_ARCHIVE=gpu-check
CS_SUMMARY="python3 $ROOT/scripts/lib/gpu_summary.py"
CS_ON_FAIL="nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv"
cs_init "$OUT" "${DCOMM_GPU_CHECK_BUDGET_S:-300}"
[ -f "$OUT.gpu.txt" ] && cp "$OUT.gpu.txt" "$CS_WORK/gpu.txt" && rm -f "$OUT.gpu.txt"
export LD_LIBRARY_PATH="$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
TEST=$BIN/test_gpu
BENCH=$BIN/dcomm-bench

# A step whose deadline for dcomm's waits is three quarters of its limit: a stuck kernel or
# wait reports its peer before the step is killed.
step() {
  if [ "${CS_DRY_RUN:-0}" = 1 ]; then cs_step "$@"; else cs_step "$1" "$2" "$3" bash -c 'DCOMM_TIMEOUT_MS=$((CS_STEP_LIMIT_S * 750)) exec "$@"' _ "${@:4}"; fi
}

# 1. Probe: what the binaries need and whether they were built from these sources.
if [ "${CS_DRY_RUN:-0}" != 1 ]; then
  missing=$(ldd "$BIN"/* "$BIN"/lib/*.so* 2>/dev/null | grep 'not found' | sort -u | tr -s ' \t' ' ')
  built_from=$(sed -n 's/^sources: //p' "$BIN/MANIFEST" 2>/dev/null)
  probe() { cs_say "probe: $*" && cs_note "$*"; }
  probe "binaries: $(head -1 "$BIN/MANIFEST" 2>/dev/null || echo 'none'); $(sed -n 's/^commit: /commit /p' "$BIN/MANIFEST" 2>/dev/null); this tree: $(git rev-parse --short HEAD 2>/dev/null || echo 'no git')"
  if [ -n "$missing" ]; then probe "missing shared libraries: $missing"; fi
  if [ -n "$built_from" ] && [ "$built_from" != "$(sources_hash)" ]; then
    probe "WARNING: .gpu-bin was built from other sources ($built_from) than this tree's ($(sources_hash))"
  fi
  if "$TEST" --list-test-cases >"$CS_WORK/probe.log" 2>&1; then
    cs_record binaries prebuilt 0 "$(head -1 "$BIN/MANIFEST" 2>/dev/null)"
  else
    cs_say "prebuilt binaries missing or not starting ($(tail -1 "$CS_WORK/probe.log" 2>/dev/null)); building here"
    cs_step build 240 60 bash "$ROOT/scripts/gpu-check.sh" --build-native || exit 1
  fi
fi

# 2. Correctness: every GPU test case alone, the processes cases last.
if [ -x "$TEST" ]; then
  "$TEST" --list-test-cases 2>/dev/null | awk '/^=+$/ { sep++; next } sep == 1' >"$CS_WORK/cases.txt"
else
  echo "(the GPU test cases, listed by .gpu-bin/test_gpu once built)" >"$CS_WORK/cases.txt"
fi
{
  grep -v 'processes' "$CS_WORK/cases.txt"
  grep 'processes' "$CS_WORK/cases.txt"
} >"$CS_WORK/order.txt"
i=0
while IFS= read -r name; do
  i=$((i + 1))
  cap=30
  case $name in *"every type, op and collective"* | *"pinned host memory"* | *"reduction kernels"*) cap=60 ;; esac
  case $name in *"collectives on device memory: processes"*) cap=90 ;; esac
  # doctest filters split at commas: '?' matches one character, the comma included.
  step "test$(printf %02d $i)" $cap 10 "$TEST" "--test-case=${name//,/?}" --duration=true
  rc=$?
  cs_note "test$(printf %02d $i): $name"
  if ((rc == 77)); then  # the binary found no usable device although nvidia-smi did: stop here
    cs_note "the GPU tests see no usable CUDA device (driver older than the CUDA runtime they were built with?)"
    exit 1
  fi
done <"$CS_WORK/order.txt"

# What the test cases measured (suspend: the GPU memory freed against the arenas).
grep -h '^suspend:' "$CS_WORK"/test*.log 2>/dev/null | while IFS= read -r line; do cs_note "$line"; done

# 3. dcomm's libnccl.so.2 on device memory: 2 ranks on the GPU through the NCCL API (every
# collective, PreMulSum with a device scalar, one group of in-place all-to-all and PreMulSum,
# a CUDA graph replayed; then NCCL 2.30's windows on device memory: put, signal, wait, peer
# pointers).
if [ -x "$BIN/nccl_local_test" ] || [ "${CS_DRY_RUN:-0}" = 1 ]; then
  step nccl_device 45 10 "$BIN/nccl_local_test" device
  if [ -x "$BIN/nccl_api_2_30_test" ] || [ "${CS_DRY_RUN:-0}" = 1 ]; then
    step nccl_device_windows 30 10 "$BIN/nccl_api_2_30_test" device
  else
    cs_record nccl_device_windows skipped 0 "nccl_api_2_30_test was not built"
  fi
else
  cs_record nccl_device skipped 0 "dcomm's libnccl.so.2 or nccl_local_test was not built"
fi

# The machine's torch 2.x with CUDA, if any (steps 3b and 8).
TORCH_HAS=$(python3 -c "import torch; print(torch.__version__.split('+')[0] if torch.cuda.is_available() else '')" 2>/dev/null)

# 3b. torch's own NCCL process group on dcomm's libnccl.so.2 (the machine's torch): every NCCL
# symbol its libtorch_cuda.so imports is dcomm's and binds to it (tests/nccl/torch_loads.sh), then
# a DDP step of 2 ranks on the one GPU, dcomm's library preloaded, against a one-process step.
NCCL_SO=$BIN/lib/libnccl.so.2
if { [ -n "$TORCH_HAS" ] && [ -f "$NCCL_SO" ]; } || [ "${CS_DRY_RUN:-0}" = 1 ]; then
  step torch_nccl_loads 30 10 bash "$ROOT/tests/nccl/torch_loads.sh" "$NCCL_SO" python3
  step torch_nccl_ddp 60 20 env LD_PRELOAD="$NCCL_SO" python3 -m torch.distributed.run --standalone \
    --nproc_per_node 2 "$ROOT/tests/nccl/torch_nccl_ddp.py"
else
  cs_record torch_nccl skipped 0 "no CUDA torch here, or dcomm's libnccl.so.2 was not built"
fi

# 4. The 2-rank all_reduce table (threads as ranks sharing the GPU), each size beside a device
# copy of it; then the tuning rows: 256 MiB, one setting changed at a time.
step all_reduce_2 45 15 "$BENCH" all_reduce -t 2 -g 1 -b 1M -e 256M -f 4 -n 20 -w 5 -c 1 -J "$CS_WORK/all_reduce_2.json"
tune() {
  local name=$1
  shift
  step "tune_$name" 20 8 env "$@" "$BENCH" all_reduce -t 2 -g 1 -b 256M -e 256M -n 20 -w 5 -c 1 -J "$CS_WORK/tune_$name.json"
}
tune channels16 DCOMM_CUDA_CHANNELS=16
tune channels32 DCOMM_CUDA_CHANNELS=32
tune threads256 DCOMM_CUDA_THREADS=256
tune slot128k DCOMM_CUDA_SLOT_BYTES=128K
tune slot1m DCOMM_CUDA_SLOT_BYTES=1M
tune slots8 DCOMM_CUDA_SLOTS=8

# 5. Processes (CUDA IPC; without MPS their contexts take turns on the GPU).
step all_reduce_2_procs 40 15 "$BENCH" all_reduce -N 2 -g 1 -b 64M -e 64M -n 5 -w 2 -c 1 -J "$CS_WORK/all_reduce_2_procs.json"

# 6. Kernel microbenchmarks: bytes read + written per second, next to the device copy.
if [ -x "$BIN/dcomm-micro-kernel_bench" ] || [ "${CS_DRY_RUN:-0}" = 1 ]; then
  step kernels 45 15 "$BIN/dcomm-micro-kernel_bench" --benchmark_format=json \
    --benchmark_out="$CS_WORK/kernels.json" --benchmark_out_format=json --benchmark_min_time=0.1
else
  cs_record kernels skipped 0 "dcomm-micro-kernel_bench was not built (no Google Benchmark)"
fi

# 6b. One-sided put + signal on device memory against send/recv and the device copy.
if [ -x "$BIN/dcomm-device-one-sided-bench" ] || [ "${CS_DRY_RUN:-0}" = 1 ]; then
  step one_sided 30 10 "$BIN/dcomm-device-one-sided-bench" 3 64M
fi

# 7. The other collectives, and 4 ranks.
step all_reduce_4 25 10 "$BENCH" all_reduce -t 4 -g 1 -b 16M -e 256M -f 16 -n 10 -w 3 -c 1 -J "$CS_WORK/all_reduce_4.json"
for c in reduce_scatter all_gather broadcast send_recv; do
  step "${c}_2" 15 6 "$BENCH" $c -t 2 -g 1 -b 64M -e 64M -n 10 -w 3 -c 1 -J "$CS_WORK/${c}_2.json"
done

# 8. The torch backend on CUDA tensors (the machine's torch 2.x): module.cpp compiled against
# its Python and linked with the prebuilt core (the whole backend when the core is missing or
# the torch differs), then 2 ranks on the one GPU under torchrun (collectives, coalescing,
# stream order, futures, DDP against Gloo on the CPU; tests/torch/backend_checks.py gpu).
if [ -n "$TORCH_HAS" ] || [ "${CS_DRY_RUN:-0}" = 1 ]; then
  TORCH_PKG=$ROOT/build-gpu/torch-pkg  # outside the archive
  prebuilt=()
  if [ -f "$BIN/torch/libdcomm_torch_core.a" ] && [ "$TORCH_HAS" = "$TORCH_VERSION" ]; then
    prebuilt=(DCOMM_TORCH_PREBUILT="$BIN/torch/libdcomm_torch_core.a")
  elif [ "${CS_DRY_RUN:-0}" != 1 ]; then
    cs_note "torch: $TORCH_HAS here, the prebuilt core is for $TORCH_VERSION (or missing): the whole backend is built"
  fi
  step torch_build 150 40 env DCOMM_TORCH_CUDA=1 MAX_JOBS="$(nproc)" "${prebuilt[@]}" bash -c \
    "cd '$ROOT/python' && python3 setup.py -q build_ext -b '$TORCH_PKG' -t '$ROOT/build-gpu/torch-tmp' && cp dcomm_torch/__init__.py '$TORCH_PKG/dcomm_torch/'"
  torch_gpu() {
    step "$1" 90 30 env PYTHONPATH="$TORCH_PKG" DCOMM_TORCH_TEST_TIMEOUT_S=60 python3 -m torch.distributed.run \
      --standalone --nproc_per_node 2 "$ROOT/tests/torch/backend_checks.py" gpu
  }
  if [ -f "$TORCH_PKG/dcomm_torch/__init__.py" ] || [ "${CS_DRY_RUN:-0}" = 1 ]; then
    torch_gpu torch_gpu_2
    # A crash with the prebuilt core: once more with the whole backend compiled here, which
    # tells a fault of the mix (two compilers, two sets of flags) from one of the backend.
    if [ $? -ne 0 ] && [ ${#prebuilt[@]} -gt 0 ]; then
      step torch_build_whole 150 60 env DCOMM_TORCH_CUDA=1 MAX_JOBS="$(nproc)" bash -c \
        "cd '$ROOT/python' && python3 setup.py -q build_ext -b '$TORCH_PKG' -t '$ROOT/build-gpu/torch-tmp-whole' && cp dcomm_torch/__init__.py '$TORCH_PKG/dcomm_torch/'" &&
        torch_gpu torch_gpu_2_whole
    fi
  fi
else
  cs_record torch skipped 0 "python3 here has no CUDA torch 2.x"
fi

# The table (and the archive) come from the EXIT trap.
[ "${CS_DRY_RUN:-0}" = 1 ] && exit 0
grep -q $'\tFAIL\t\|\tTIMEOUT\t' "$CS_RESULTS" && exit 1
exit 0
