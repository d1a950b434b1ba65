#!/usr/bin/env bash
# Builds every fuzz target (libFuzzer, with AddressSanitizer and UndefinedBehaviorSanitizer) and
# runs each for DCOMM_FUZZ_SECONDS (default 30) from its seed corpus (tests/fuzz/corpus/NAME).
# Any crash, sanitizer report or leak fails the run, and the input that caused it is kept in
# OUTDIR/NAME/ (default build/fuzz). Needs clang and libclang-rt (Debian: clang, libclang-rt-14-dev).
#   bash tests/fuzz/run.sh [OUTDIR]
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$ROOT/build/fuzz}
SECONDS_EACH=${DCOMM_FUZZ_SECONDS:-30}
CXX=${DCOMM_FUZZ_CXX:-$(command -v clang++ || command -v clang++-14)}
[ -n "$CXX" ] || { echo "fuzz: no clang++ (apt-get install clang libclang-rt-14-dev)"; exit 1; }
mkdir -p "$OUT"
TARGETS=(store control unique_id topology link_model config wire)
failed=()
for t in "${TARGETS[@]}"; do
  bin=$OUT/fuzz_$t
  if ! "$CXX" -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
      -I "$ROOT/include" "$ROOT/tests/fuzz/fuzz_$t.cpp" -o "$bin" -lcrypto -pthread 2>"$OUT/build_$t.log"; then
    echo "fuzz: building $t failed:"; head -30 "$OUT/build_$t.log"; failed+=("$t (build)"); continue
  fi
  work=$OUT/$t
  rm -rf "$work" && mkdir -p "$work/corpus" "$work/crashes"
  cp "$ROOT/tests/fuzz/corpus/$t/"* "$work/corpus/" 2>/dev/null
  # -max_len bounds each input; -rss_limit_mb catches memory blow-ups; the time bounds the run.
  if (cd "$work" && "$bin" -max_total_time="$SECONDS_EACH" -max_len=4096 -rss_limit_mb=1024 -timeout=10 \
        -artifact_prefix="$work/crashes/" -print_final_stats=1 corpus >"$work/log" 2>&1); then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/log" | grep -o '[0-9]*$')
    echo "fuzz: $t ok ($runs inputs in ${SECONDS_EACH}s, corpus $(ls "$work/corpus" | wc -l))"
  else
    echo "fuzz: $t FOUND A PROBLEM:"; grep -m 20 -E 'ERROR|SUMMARY|runtime error|Test unit written' "$work/log"
    failed+=("$t")
  fi
done
if ((${#failed[@]})); then echo "fuzz: failed: ${failed[*]}"; exit 1; fi
echo "fuzz: all ${#TARGETS[@]} targets clean"
