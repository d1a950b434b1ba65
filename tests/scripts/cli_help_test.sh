#!/bin/bash
# The tools' command lines (tools/cli.hpp): --help and -h print every flag and exit 0; an
# unknown flag, a flag without its value and a value the flag refuses each exit 2 naming what
# is wrong and pointing at --help.
#   tests/scripts/cli_help_test.sh path/to/dcomm-bench path/to/dcomm-sim [path/to/dcomm-topo]
set -u
BENCH=$1 SIM=$2 TOPO=${3:-}
failed=0
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT

# expect CODE "stdout or stderr pattern" command...
expect() {
  local code=$1 pattern=$2
  shift 2
  "$@" >"$out" 2>"$err"
  local rc=$?
  if [ "$rc" -ne "$code" ] || ! grep -qF -- "$pattern" "$out" "$err"; then
    echo "cli_help_test: FAILED: $* -> exit $rc (want $code), output lacks '$pattern':"
    head -5 "$out" "$err" | sed 's/^/  /'
    failed=1
  else
    echo "cli_help_test: ok     $* -> exit $rc, '$pattern'"
  fi
}
# Every flag of `flags` is in the tool's --help, and -h prints the same.
lists() {
  local tool=$1
  shift
  "$tool" --help >"$out" 2>&1 || { echo "cli_help_test: FAILED: $tool --help exits $?"; failed=1; }
  for f in "$@"; do
    grep -qE -- "^  $f( |$)" "$out" || { echo "cli_help_test: FAILED: $tool --help lacks $f"; failed=1; }
  done
  cmp -s "$out" <("$tool" -h 2>&1) || { echo "cli_help_test: FAILED: $tool -h differs from --help"; failed=1; }
  echo "cli_help_test: ok     $tool --help lists $# flags"
}

lists "$BENCH" -N -b -e -f -o -d -r -n -w -c -J -M -R -g -t -B
expect 0 "usage: dcomm-bench" "$BENCH" --help
expect 2 "unknown flag --nope" "$BENCH" --nope
expect 2 "see dcomm-bench --help" "$BENCH" --nope
expect 2 "missing value after -N" "$BENCH" all_reduce -N
expect 2 "unknown op nope" "$BENCH" -o nope
expect 2 "unknown collective gather_all" "$BENCH" gather_all

lists "$SIM" -n -s --slots --max-slices --local --exchanges --cores --wake --step-cpu
# The exchanges run and check every block's place (exit 1 on a failure).
expect 0 "ok" "$SIM" --exchanges -n 1,5,64 -s 8,1M
expect 2 "unknown flag -x" "$SIM" -x 1
expect 2 "missing value after -n" "$SIM" -n
expect 0 "--compute-ms" "$SIM" plan --help
expect 2 "are required" "$SIM" plan --grad 64M
expect 2 "unknown flag --speed" "$SIM" plan --speed 3

if [ -n "$TOPO" ]; then
  lists "$TOPO" -j
  expect 2 "unexpected argument extra" "$TOPO" extra
fi
exit $failed
