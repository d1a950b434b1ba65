#!/usr/bin/env bash
# dcomm's libnccl.so.2 is shaped as NCCL's: SONAME libnccl.so.2, no symbol versions, and
# exports nothing but the NCCL API (pnccl* global, nccl* weak aliases).
set -euo pipefail
lib=$1
soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = libnccl.so.2 ] || { echo "FAIL: SONAME is '$soname'"; exit 1; }
if readelf -V "$lib" | grep -q "Version definition"; then echo "FAIL: the library defines symbol versions"; exit 1; fi
others=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^p\?nccl' || true)
[ -z "$others" ] || { echo "FAIL: exports beyond the NCCL API:"; echo "$others" | head; exit 1; }
strong=$(nm -D --defined-only "$lib" | awk '$2 != "W" && $3 ~ /^nccl/ && $3 != "ncclResetDebugInitInternal" {print $3}')
[ -z "$strong" ] || { echo "FAIL: nccl* names that are not weak aliases: $strong"; exit 1; }
echo "ok: $(nm -D --defined-only "$lib" | wc -l) symbols, SONAME $soname"
