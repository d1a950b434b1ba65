#!/usr/bin/env bash
# The torch 2.x side of dcomm_torch (a c10d::Backend, the CUDA path) compiled against a torch 2
# wheel's headers, since this machine runs Debian's torch 1.13: the CPU build of every C++
# source and module.cpp's CUDA build (-fsyntax-only; nothing here can load them), and the CUDA
# build's sources that need no Python (process_group.cpp, backend_hooks.cpp, window.cpp, cuda_path.cpp, device_glue.cu)
# compiled for real (sm_90) into $cache/libdcomm_torch_core.a: the GPU check's prebuilt core
# (scripts/gpu-check.sh --build-only), so the GPU machine compiles only module.cpp. The archive
# is reused while the sources and the torch version are unchanged (a stamp of their hash).
# The wheel comes from pip (cached in $DCOMM_TORCH2_CACHE, default build/torch2); without the
# network or nvcc it skips (77).
#   torch2_compile.sh [--archive] [build-dir]     --archive: only the core archive
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
if ((archive_only)) && ((!have_cuda)); then echo "torch2_compile: no nvcc at $nvcc: no core archive"; exit 77; fi
# The core archive's stamp: torch's version and every source it is made of.
stamp="$version $(find "$root/include" "$csrc" -type f | LC_ALL=C sort | xargs cat | sha256sum | cut -c1-16)"
core="$cache/libdcomm_torch_core.a"
core_fresh=0
[ -f "$core" ] && [ "$(cat "$core.stamp" 2>/dev/null)" = "$stamp" ] && core_fresh=1
if ((!archive_only)); then
  for f in module.cpp process_group.cpp backend_hooks.cpp window.cpp; do
    check "torch $version CPU build: $f" g++ "${flags[@]}" "$csrc/$f"
  done
fi
if ((have_cuda)); then
  # No Python headers: the core must not depend on the Python it will be loaded into.
  cuda_flags=(-DDCOMM_TORCH_CUDA=1 -I/usr/local/cuda/include)
  for f in "${flags[@]}"; do
    case $f in -fsyntax-only | "-I$pyinc") ;; *) cuda_flags+=("$f") ;; esac
  done
  ((archive_only)) || check "torch $version CUDA build: module.cpp" g++ "${flags[@]}" -DDCOMM_TORCH_CUDA=1 -I/usr/local/cuda/include "$csrc/module.cpp"
  if ((!core_fresh)); then
    for f in process_group backend_hooks window cuda_path; do
      check "torch $version CUDA build: $f.cpp (object)" g++ "${cuda_flags[@]}" -O3 -g0 -fPIC -D_GLIBCXX_USE_CXX11_ABI=1 \
        -c "$csrc/$f.cpp" -o "$cache/$f.o"
    done
    check "nvcc: device_glue.cu (sm_90)" "$nvcc" -std=c++20 -O3 --expt-relaxed-constexpr -diag-suppress=2810,20011,20014 \
          -Xcompiler -fPIC -gencode=arch=compute_90,code=sm_90 -I"$root/include" -c "$csrc/device_glue.cu" -o "$cache/device_glue.o"
  else
    echo "ok    core archive up to date ($core)"
  fi
else
  echo "skip  CUDA build: no nvcc at $nvcc"
fi
fail=0
for i in "${!labels[@]}"; do
  if wait "${pids[$i]}"; then echo "ok    ${labels[$i]}"; else echo "FAIL  ${labels[$i]}"; cat "$cache/out.$i.txt"; fail=1; fi
done
if ((have_cuda)) && ((!core_fresh)) && ((!fail)); then
  rm -f "$core" && ar rcs "$core" "$cache/process_group.o" "$cache/backend_hooks.o" "$cache/window.o" "$cache/cuda_path.o" "$cache/device_glue.o"
  echo "$stamp" >"$core.stamp"
  echo "ok    core archive: $core ($(du -h "$core" | cut -f1))"
fi
exit $fail
