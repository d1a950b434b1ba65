#!/usr/bin/env bash
# The CUDA build of dcomm_torch (a c10d::Backend on CUDA tensors) compiled against a torch 2
# wheel's headers (the GPU machine's torch), where nothing can load it:
#   torch2_compile.sh [build-dir]            every C++ source of the CUDA build, -fsyntax-only
#                                            (the test; device_glue.cu is libnccl.so.2's, which
#                                            the main build compiles)
#   torch2_compile.sh --archive [build-dir]  the sources that need no Python (process_group.cpp,
#                                            collectives.cpp, work.cpp, backend_hooks.cpp,
#                                            window.cpp, cuda_path.cpp,
#                                            device_glue.cu) compiled (sm_90) into
#                                            $cache/libdcomm_torch_core.a: the GPU check's
#                                            prebuilt core (scripts/gpu-check.sh --build-only),
#                                            so the GPU machine compiles only module.cpp; reused
#                                            while the sources and torch's version are unchanged
# The CPU build is not here: the torch_newest test builds it for real against the newest torch.
# The wheel comes from pip (cached in $DCOMM_TORCH2_CACHE, default build/torch2); without the
# network or nvcc it skips (77).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
archive_only=0
if [ "${1:-}" = --archive ]; then archive_only=1; shift; fi
build="${1:-$root/build}"
cache="${DCOMM_TORCH2_CACHE:-$build/torch2}"
version="${DCOMM_TORCH2_VERSION:-2.11.0}"
py=/usr/bin/python3
pyinc="$($py -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
nvcc="${CUDACXX:-/usr/local/cuda/bin/nvcc}"
mkdir -p "$cache"
if [ ! -d "$cache/torch-$version/torch/include" ]; then
  if ! ls "$cache"/torch-"$version"-*.whl >/dev/null 2>&1; then
    $py -m pip download --quiet --no-deps --python-version 3.11 --only-binary=:all: --platform manylinux_2_28_x86_64 \
        -d "$cache" "torch==$version" || { echo "torch2_compile: cannot download torch $version (no network?): skipped"; exit 77; }
  fi
  whl="$(ls "$cache"/torch-"$version"-*.whl | head -1)"
  $py - "$whl" "$cache/torch-$version" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith(("torch/include/", "torch/version.py"))])
PY
fi
inc="$cache/torch-$version/torch/include"
csrc="$root/python/dcomm_torch/csrc"
flags=(-std=c++20 -fsyntax-only -Wno-deprecated-declarations -DTORCH_EXTENSION_NAME=_C -DTORCH_API_INCLUDE_EXTENSION_H
       -I"$inc" -I"$inc/torch/csrc/api/include" -I"$root/include" -I"$pyinc")
# Two at a time (each takes a minute or more); reported in order at the end.
labels=() pids=()
check() {  # label, then the command
  labels+=("$1"); shift
  local i=$(( ${#labels[@]} - 1 ))
  "$@" >"$cache/out.$i.txt" 2>&1 &
  pids+=($!)
  (( ${#pids[@]} % 2 )) || wait "${pids[-2]}" 2>/dev/null || true
}
have_cuda=0
[ -x "$nvcc" ] && [ -f /usr/local/cuda/include/cuda_runtime.h ] && have_cuda=1
if ((!have_cuda)); then echo "torch2_compile: no nvcc at $nvcc: nothing to compile (skipped)"; exit 77; fi
# No Python headers in the core: it must not depend on the Python it will be loaded into.
cuda_flags=(-DDCOMM_TORCH_CUDA=1 -I/usr/local/cuda/include)
for f in "${flags[@]}"; do
  case $f in -fsyntax-only | "-I$pyinc") ;; *) cuda_flags+=("$f") ;; esac
done
core_sources=(process_group collectives work backend_hooks window cuda_path)
if ((!archive_only)); then
  check "torch $version CUDA build: module.cpp" g++ "${flags[@]}" -DDCOMM_TORCH_CUDA=1 -I/usr/local/cuda/include "$csrc/module.cpp"
  for f in "${core_sources[@]}"; do
    check "torch $version CUDA build: $f.cpp" g++ "${cuda_flags[@]}" -fsyntax-only "$csrc/$f.cpp"
  done
else
  # The archive's stamp: torch's version and every source it is made of.
  stamp="$version $(find "$root/include" "$csrc" -type f | LC_ALL=C sort | xargs cat | sha256sum | cut -c1-16)"
  core="$cache/libdcomm_torch_core.a"
  if [ -f "$core" ] && [ "$(cat "$core.stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "ok    core archive up to date ($core)"
    exit 0
  fi
  for f in "${core_sources[@]}"; do
    check "torch $version CUDA build: $f.cpp (object)" g++ "${cuda_flags[@]}" -O3 -g0 -fPIC -D_GLIBCXX_USE_CXX11_ABI=1 \
      -c "$csrc/$f.cpp" -o "$cache/$f.o"
  done
  check "nvcc: device_glue.cu (sm_90)" "$nvcc" -std=c++20 -O3 --expt-relaxed-constexpr -diag-suppress=2810,20011,20014 \
    -Xcompiler -fPIC -gencode=arch=compute_90,code=sm_90 -I"$root/include" -c "$csrc/device_glue.cu" -o "$cache/device_glue.o"
fi
fail=0
for i in "${!labels[@]}"; do
  if wait "${pids[$i]}"; then echo "ok    ${labels[$i]}"; else echo "FAIL  ${labels[$i]}"; cat "$cache/out.$i.txt"; fail=1; fi
done
if ((archive_only)) && ((!fail)); then
  objects=()
  for f in "${core_sources[@]}"; do objects+=("$cache/$f.o"); done
  rm -f "$core" && ar rcs "$core" "${objects[@]}" "$cache/device_glue.o"
  echo "$stamp" >"$core.stamp"
  echo "ok    core archive: $core ($(du -h "$core" | cut -f1))"
fi
exit $fail
