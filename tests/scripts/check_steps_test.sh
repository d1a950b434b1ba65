#!/usr/bin/env bash
# The GPU check's step engine (scripts/lib/check-steps.sh) without a GPU: a step that outruns
# the budget is cut at what is left, a later one that no longer fits is skipped and named, the
# table is printed and the archive written; and a check killed mid-step still prints its table
# within seconds, naming the step it was in.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# 1. The budget: 8 s in all, 1 s kept for the table.
cat >"$T/budget.sh" <<EOS
source "$ROOT/scripts/lib/check-steps.sh"
CS_RESERVE=1
cs_init "$T/out1" 8
cs_step quick 10 1 sleep 1
cs_step slow 30 1 sleep 30       # cut at what is left (about 6 s)
cs_step late 10 3 sleep 1        # no time left: skipped
cs_note "a note under the table"
EOS
start=$(date +%s)
bash "$T/budget.sh" >"$T/budget.log" 2>&1
took=$(($(date +%s) - start))
cat "$T/budget.log"
((took <= 12)) || fail "the check took ${took}s with an 8 s budget"
grep -qE '^quick +ok ' "$T/budget.log" || fail "the quick step is not ok in the table"
grep -qE '^slow +TIMEOUT .*killed at its [0-9]+s limit' "$T/budget.log" || fail "the slow step was not cut at the budget"
grep -qE '^late +skipped .*no time left' "$T/budget.log" || fail "the late step was not skipped and named"
grep -q 'a note under the table' "$T/budget.log" || fail "the note is missing"
[ -s "$T/out1/check.tar.gz" ] || fail "no archive"
tar -tzf "$T/out1/check.tar.gz" | grep -q 'quick.log' || fail "the archive lacks the step logs"
[ -s "$T/out1/table.txt" ] || fail "no table.txt"

# 2. Killed mid-step: the trap prints the table at once.
cat >"$T/killed.sh" <<EOS
source "$ROOT/scripts/lib/check-steps.sh"
cs_init "$T/out2" 120
cs_step first 10 1 true
cs_step stuck 100 1 sleep 100
EOS
bash "$T/killed.sh" >"$T/killed.log" 2>&1 &
pid=$!
sleep 2
kill -TERM $pid
start=$(date +%s)
wait $pid
rc=$?
took=$(($(date +%s) - start))
cat "$T/killed.log"
((took <= 5)) || fail "the killed check took ${took}s to end"
((rc != 0)) || fail "a killed check exited 0"
grep -qE '^first +ok' "$T/killed.log" || fail "the table after the kill lacks the finished step"
grep -qE '^stuck +KILLED' "$T/killed.log" || fail "the table does not name the step that was killed"
grep -q 'killed by a signal' "$T/killed.log" || fail "the table does not say it was killed"
[ -s "$T/out2/check.tar.gz" ] || fail "no archive after the kill"
pgrep -f "sleep 100" >/dev/null && fail "the killed step's process is still running"

# 3. The summary copes with a check that produced nothing.
python3 "$ROOT/scripts/lib/gpu_summary.py" "$T" >"$T/summary.txt" || fail "the summary failed on an empty folder"
grep -q "kernel benchmarks: no results" "$T/summary.txt" || fail "summary of nothing"
# 4. And reads dcomm-bench's JSON (a host run stands in for the device run's file).
if [ -n "${1:-}" ]; then
  "$1" all_reduce -N 2 -b 1M -e 4M -f 4 -n 2 -w 1 -c 1 -J "$T/all_reduce_2.json" >/dev/null || fail "dcomm-bench failed"
  python3 "$ROOT/scripts/lib/gpu_summary.py" "$T" >"$T/summary.txt" || fail "the summary failed on dcomm-bench's JSON"
  grep -qE "all_reduce 2 ranks on one GPU .*#wrong 0" "$T/summary.txt" || { cat "$T/summary.txt"; fail "summary of a run"; }
  grep -qE "^ +1Mi +[0-9]+ +[0-9]+ " "$T/summary.txt" && grep -qE "^ +4Mi +[0-9]+ " "$T/summary.txt" ||
    { cat "$T/summary.txt"; fail "the summary's rows"; }
fi

# 5. A failed step: its limit reaches the command (CS_STEP_LIMIT_S), and CS_ON_FAIL's output
# ends its log, after a failure and after a timeout.
cat >"$T/fail.sh" <<EOS
source "$ROOT/scripts/lib/check-steps.sh"
CS_RESERVE=1
CS_ON_FAIL="echo still on the GPU: nothing"
cs_init "$T/out5" 30
cs_step limited 7 1 bash -c 'echo "limit \$CS_STEP_LIMIT_S"; exit 3'
cs_step hung 2 1 sleep 30
EOS
bash "$T/fail.sh" >"$T/fail.log" 2>&1
tar -xzf "$T/out5/check.tar.gz" -C "$T/out5"
grep -q "limit 7" "$T/out5/limited.log" || fail "the step did not see its limit"
grep -q "still on the GPU: nothing" "$T/out5/limited.log" || fail "CS_ON_FAIL's output is not in the failed step's log"
grep -q "still on the GPU: nothing" "$T/out5/hung.log" || fail "CS_ON_FAIL did not run after a timeout"

# 6. The GPU check's dry run, with no GPU: every step, its cap, and the caps' total against the budget.
bash "$ROOT/scripts/gpu-check.sh" --dry-run >"$T/dry.log" 2>&1 || { cat "$T/dry.log"; fail "the dry run failed"; }
grep -qE "^== dry run: [0-9]+ steps, caps adding up to [0-9]+s against a 300s budget" "$T/dry.log" || { cat "$T/dry.log"; fail "dry run: no total"; }
for s in nccl_device all_reduce_2 tune_slots8 all_reduce_2_procs kernels torch_build; do
  grep -qE "^$s +planned +[0-9]+s +ends by [0-9]+s" "$T/dry.log" || { cat "$T/dry.log"; fail "dry run: step $s is missing"; }
done
# The order of value: the NCCL device test and the 2-rank table before the kernels, torch last.
order=$(awk '$2 == "planned" { print $1 }' "$T/dry.log" | tr '\n' ' ')
case $order in *nccl_device*all_reduce_2*tune_*all_reduce_2_procs*kernels*torch_build*) ;; *) fail "dry run order: $order" ;; esac
echo "check-steps: all good"
