#!/usr/bin/env bash
# torch loads dcomm's libnccl.so.2 in place of the NCCL it pins (issue 38): every NCCL symbol
# libtorch_cuda.so imports is defined by dcomm's library; then, with dcomm's library preloaded,
# `import torch`, torch.cuda.nccl.version() and dist.is_nccl_available() work, ncclGetVersion
# (what torch's NCCL process group logs) answers the version dcomm's nccl.h declares, and the
# dynamic linker binds every NCCL symbol of libtorch_cuda.so to dcomm's library (LD_BIND_NOW,
# LD_DEBUG=bindings), none to the wheel's. torch.cuda.nccl.version() is the nccl.h torch was
# built against (torch 2.11's: 2.28.9), printed but not compared.
#   torch_loads.sh <dcomm's libnccl.so.2> [python]   (python: a torch with CUDA; default: the
#                                                    newest torch's venv, scripts/lib/pypi-venvs.sh)
# Exit 77 (a ctest skip) when no such torch can be had.
set -euo pipefail
lib=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)
python=${2:-}
if [ -z "$python" ]; then
  # shellcheck source=../../scripts/lib/pypi-venvs.sh
  source "$here/../../scripts/lib/pypi-venvs.sh"
  venv=$(torch_venv) || exit $?
  python=$venv/bin/python
fi
torch_lib=$("$python" -c "import os, torch; print(os.path.dirname(torch.__file__) + '/lib')" 2>/dev/null | tail -1)
cuda_lib=$torch_lib/libtorch_cuda.so
[ -f "$cuda_lib" ] || { echo "skip: $python's torch has no libtorch_cuda.so (a CPU-only build)"; exit 77; }

fail=0
imports=$(nm -D --undefined-only "$cuda_lib" | awk '{print $2}' | grep '^nccl' | sort -u)
defined=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort -u)
missing=$(comm -23 <(echo "$imports") <(echo "$defined"))
if [ -n "$missing" ]; then
  echo "FAIL: libtorch_cuda.so imports NCCL symbols dcomm's library does not define:" $missing
  fail=1
fi
echo "$(echo "$imports" | wc -l) NCCL symbols imported by $cuda_lib, all defined by $lib: $([ -z "$missing" ] && echo yes || echo no)"

want=$(sed -n 's/^#define NCCL_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' "$here/../../nccl/include/nccl.h" | paste -sd, | sed 's/,/, /g')
trace=$(mktemp -d)
trap 'rm -rf "$trace"' EXIT
out=$(LD_PRELOAD="$lib" LD_BIND_NOW=1 LD_DEBUG=bindings LD_DEBUG_OUTPUT="$trace/ld" "$python" -c '
import ctypes, os, torch, torch.distributed as dist
v = ctypes.c_int(0)
ctypes.CDLL(os.environ["LD_PRELOAD"]).ncclGetVersion(ctypes.byref(v))  # already loaded: the same library
code = v.value
print("torch", torch.__version__, "built against nccl", torch.cuda.nccl.version(), "is_nccl_available",
      dist.is_nccl_available(), "ncclGetVersion", (code // 10000, code // 100 % 100, code % 100))
') || { echo "FAIL: import torch with dcomm's libnccl.so.2 preloaded: $out"; exit 1; }
echo "$out"
case "$out" in
  *"is_nccl_available True ncclGetVersion ($want)"*) ;;
  *) echo "FAIL: expected is_nccl_available True and ncclGetVersion ($want)"; fail=1 ;;
esac
# "symbol library" for each NCCL symbol of libtorch_cuda.so the linker bound, the library's path
# resolved once per distinct path (the trace names it as loaded: build/nccl/libnccl.so.2, a link).
bound=$(grep -h "binding file $cuda_lib .* to .*: normal symbol \`nccl" "$trace"/ld.* |
  sed "s/.* to \([^ ]*\) .*symbol \`\([a-zA-Z0-9]*\)'.*/\2 \1/" | sort -u)
declare -A real
while read -r path; do [ -z "$path" ] || real[$path]=$(realpath "$path"); done < <(echo "$bound" | awk '{print $2}' | sort -u)
ours=0
others=""
while read -r sym path; do
  [ -n "$sym" ] || continue  # nothing bound at all: counted below
  if [ "${real[$path]}" = "$lib" ]; then ours=$((ours + 1)); else others+="$sym -> $path"$'\n'; fi
done <<<"$bound"
if [ -n "$others" ]; then
  echo "FAIL: libtorch_cuda.so bound NCCL symbols elsewhere:"; echo "$others" | head
  fail=1
fi
n_imports=$(echo "$imports" | wc -l)
if [ "$ours" -ne "$n_imports" ]; then
  echo "FAIL: $ours of $n_imports NCCL symbols of libtorch_cuda.so bound to dcomm's library"
  fail=1
fi
echo "$ours of $n_imports NCCL symbols of libtorch_cuda.so bound to $lib"
[ $fail -eq 0 ] && echo ok
exit $fail
