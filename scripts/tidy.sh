#!/usr/bin/env bash
# clang-tidy over every public C++ header (.clang-tidy: bugprone-*, performance-*, functions at
# most 80 lines; a finding is an error). One translation unit includes them all, the optional
# parts' headers (UCX, verbs, hwloc) where their packages are installed, so each header is read
# once: about a minute. The .cuh headers are nvcc's and are left out. Exit 77 (ctest: skipped)
# without clang-tidy (apt-get install clang-tidy); ctest's `tidy` test runs it.
#   scripts/tidy.sh [BUILD_DIR]      the generated source goes to BUILD_DIR/tidy (default build)
set -euo pipefail
cd "$(dirname "$0")/.."
ct=$(command -v clang-tidy-14 || command -v clang-tidy || true)
if [ -z "$ct" ]; then
  echo "tidy: clang-tidy not found (apt-get install clang-tidy)"
  exit 77
fi
out=${1:-build}/tidy
mkdir -p "$out"
defines=()
skip=()
have() { pkg-config --exists "$1" 2>/dev/null; }
if have ucx; then defines+=(-DDCOMM_HAS_UCX=1); else skip+=(dcomm/transport/ucx.hpp); fi
if have libibverbs; then
  defines+=(-DDCOMM_HAS_VERBS=1)
else
  skip+=(dcomm/transport/verbs.hpp dcomm/transport/verbs_device.hpp)
fi
if have hwloc; then defines+=(-DDCOMM_HAS_HWLOC=1); else skip+=(dcomm/topo/hwloc_detect.hpp); fi
{
  echo "// Every public header, for scripts/tidy.sh (generated)."
  (cd include && find dcomm -name '*.hpp' | sort) | while read -r h; do
    for s in "${skip[@]+"${skip[@]}"}"; do [ "$h" = "$s" ] && continue 2; done
    echo "#include <$h>"
  done
} >"$out/all.cpp"
start=$SECONDS
if "$ct" --quiet --config-file=.clang-tidy "$out/all.cpp" -- -std=c++20 -Iinclude "${defines[@]+"${defines[@]}"}" -x c++ >"$out/tidy.log" 2>&1; then
  echo "tidy: $(grep -c '^#include' "$out/all.cpp") headers clean ($((SECONDS - start)) s)"
  exit 0
fi
grep -E 'error:|warning:' "$out/tidy.log" | sort -u
echo "tidy: findings above ($out/tidy.log has the full report)"
exit 1
