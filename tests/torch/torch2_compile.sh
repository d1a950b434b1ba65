#!/usr/bin/env bash
# The torch 2.x side of dcomm_torch (a c10d::Backend, the CUDA path) compiled against a torch 2
# wheel's headers, since this machine runs Debian's torch 1.13: the CPU build and the CUDA build
# of every C++ source (-fsyntax-only; nothing here can load them), and device_glue.cu with nvcc.
# The wheel comes from pip (cached in $DCOMM_TORCH2_CACHE, default build/torch2); without the
# network or nvcc it skips (77). The GPU check builds and runs the real thing.
#   torch2_compile.sh [build-dir]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
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
for f in module.cpp process_group.cpp; do
  check "torch $version CPU build: $f" g++ "${flags[@]}" "$csrc/$f"
done
if [ -x "$nvcc" ] && [ -f /usr/local/cuda/include/cuda_runtime.h ]; then
  for f in module.cpp process_group.cpp cuda_path.cpp; do
    check "torch $version CUDA build: $f" g++ "${flags[@]}" -DDCOMM_TORCH_CUDA=1 -I/usr/local/cuda/include "$csrc/$f"
  done
  check "nvcc: device_glue.cu (sm_90)" "$nvcc" -std=c++20 -O3 --expt-relaxed-constexpr -diag-suppress=2810,20011,20014 \
        -gencode=arch=compute_90,code=sm_90 -I"$root/include" -c "$csrc/device_glue.cu" -o "$cache/device_glue.o"
else
  echo "skip  CUDA build: no nvcc at $nvcc"
fi
fail=0
for i in "${!labels[@]}"; do
  if wait "${pids[$i]}"; then echo "ok    ${labels[$i]}"; else echo "FAIL  ${labels[$i]}"; cat "$cache/out.$i.txt"; fail=1; fi
done
exit $fail
