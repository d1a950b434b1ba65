# The step engine of scripts/gpu-check.sh, sourced (bash): one time budget for the whole
# check; each step runs under the smaller of its own cap and what is left, a step that no
# longer fits is skipped and named; every result is a line in a table that is printed at the
# end, also when the check is killed (TERM/INT/HUP), and the logs go into one archive.
#
#   cs_init OUTDIR BUDGET_S        start the clock; logs go to $CS_WORK, results to OUTDIR
#   cs_step NAME CAP_S MIN_S CMD.. run CMD (stdout+stderr, line-buffered, to $CS_WORK/NAME.log)
#                                  under min(CAP_S, time left), with CS_STEP_LIMIT_S set to that
#                                  limit; skipped if it is under MIN_S
#   cs_note TEXT                   a line printed under the table (what a step measured)
#   cs_left                        seconds left (after the reserve for the table)
#   CS_SUMMARY=cmd                 run at the end with $CS_WORK as $1; its output follows the table
#   CS_ON_FAIL=cmd                 run after a step that failed or timed out; its output goes
#                                  to the end of that step's log (what was still on the GPU)
#   CS_DRY_RUN=1                   cs_step runs nothing: it prints the step and its cap, and
#                                  the table adds the caps up against the budget
#   CS_ONLY=REGEX                  only the steps whose names match (grep -E); the others are
#                                  listed as skipped, not selected
#
# Exit codes of a step: 0 ok, 77 skipped by the step itself, 124/137 killed at its limit.
# Steps run in the background and are waited for, so a signal reaches the trap at once
# (bash defers traps while a foreground command runs) and the trap kills the step.

CS_RESERVE=${CS_RESERVE:-10}  # seconds kept for the table and the archive

cs_now() { date +%s; }
cs_ms() { echo $(($(date +%s%N) / 1000000)); }

cs_init() {
  CS_OUT=$1
  CS_BUDGET=$2
  CS_START=$(cs_now)
  CS_WORK=$(mktemp -d "${TMPDIR:-/tmp}/check-steps.XXXXXX")
  CS_RESULTS=$CS_WORK/results.tsv
  CS_NOTES=$CS_WORK/notes.txt
  CS_CHILD=""
  CS_DONE=0
  mkdir -p "$CS_OUT"
  : >"$CS_RESULTS"
  : >"$CS_NOTES"
  trap 'cs_finish "killed by a signal"; exit 143' TERM INT HUP
  trap 'cs_finish' EXIT
}

cs_elapsed() { echo $(($(cs_now) - CS_START)); }
cs_left() { echo $((CS_BUDGET - $(cs_elapsed) - CS_RESERVE)); }
cs_say() { echo "[check +$(cs_elapsed)s] $*"; }
cs_note() { echo "$*" >>"$CS_NOTES"; }

# name \t status \t seconds \t detail
cs_record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$CS_RESULTS"; }

cs_step() {
  local name=$1 cap=$2 min=$3
  shift 3
  if [ -n "${CS_ONLY:-}" ] && ! grep -qE "$CS_ONLY" <<<"$name"; then
    cs_record "$name" skipped 0 "not selected (CS_ONLY=$CS_ONLY)"
    return 75
  fi
  if [ "${CS_DRY_RUN:-0}" = 1 ]; then
    CS_CAPS=$((${CS_CAPS:-0} + cap))
    cs_record "$name" planned "$cap" "ends by ${CS_CAPS}s at the latest$( ((CS_CAPS > CS_BUDGET)) && echo ' (past the budget: cut or skipped if the steps before take their caps)'): $*"
    return 0
  fi
  local left limit
  left=$(cs_left)
  limit=$cap
  ((left < limit)) && limit=$left
  if ((limit < min)); then
    cs_record "$name" skipped 0 "no time left: needs ${min}s, ${left}s left of the ${CS_BUDGET}s budget"
    cs_say "$name: SKIPPED (needs ${min}s, ${left}s left)"
    return 75
  fi
  local t0 rc secs status detail=""
  t0=$(cs_ms)
  CS_STEP_LIMIT_S=$limit timeout --kill-after=5 "$limit" stdbuf -oL -eL "$@" >"$CS_WORK/$name.log" 2>&1 &
  CS_CHILD=$!
  CS_CHILD_NAME=$name
  wait "$CS_CHILD"
  rc=$?
  CS_CHILD=""
  secs=$(awk -v ms=$(($(cs_ms) - t0)) 'BEGIN { printf "%.1f", ms / 1000 }')
  case $rc in
    0) status=ok ;;
    77) status=skipped; detail=$(tail -1 "$CS_WORK/$name.log") ;;
    124 | 137) status=TIMEOUT; detail="killed at its ${limit}s limit (cap ${cap}s)" ;;
    *) status=FAIL; detail="exit $rc: $(grep -v '^\s*$' "$CS_WORK/$name.log" | tail -1 | cut -c1-160)" ;;
  esac
  cs_record "$name" "$status" "$secs" "$detail"
  cs_say "$name: $status in ${secs}s${detail:+ ($detail)}"
  if [ -n "${CS_ON_FAIL:-}" ] && { [ "$status" = FAIL ] || [ "$status" = TIMEOUT ]; }; then
    { echo "== after the failure: $CS_ON_FAIL"; timeout 10 $CS_ON_FAIL 2>&1; } >>"$CS_WORK/$name.log"
  fi
  return $rc
}

# The table: every step (ran, failed, skipped), then the notes and the summary; then the
# archive of every log. Runs once, at the end or on a signal.
cs_finish() {
  ((CS_DONE)) && return 0
  CS_DONE=1
  local why=${1:-}
  if [ -n "$CS_CHILD" ]; then
    kill -TERM "$CS_CHILD" 2>/dev/null
    pkill -TERM -P "$CS_CHILD" 2>/dev/null
    cs_record "$CS_CHILD_NAME" KILLED "" "$why, while it ran"
  fi
  {
    echo
    if [ "${CS_DRY_RUN:-0}" = 1 ]; then
      echo "== dry run: $(wc -l <"$CS_RESULTS") steps, caps adding up to ${CS_CAPS:-0}s against a ${CS_BUDGET}s budget" \
        "(steps past the budget are cut or skipped, in this order) =="
    else
      echo "== check: $(wc -l <"$CS_RESULTS") steps in $(cs_elapsed)s of a ${CS_BUDGET}s budget${why:+ ($why)} =="
    fi
    awk -F'\t' '{ printf "%-22s %-8s %7s  %s\n", $1, $2, ($3 == "" ? "" : $3 "s"), substr($4, 1, 110) }' "$CS_RESULTS"
    if [ -s "$CS_NOTES" ]; then
      echo
      cat "$CS_NOTES"
    fi
    if [ -n "${CS_SUMMARY:-}" ] && [ "${CS_DRY_RUN:-0}" != 1 ]; then
      echo
      $CS_SUMMARY "$CS_WORK" 2>&1
    fi
  } | tee "$CS_WORK/table.txt"
  cp "$CS_WORK/table.txt" "$CS_OUT/table.txt"
  [ "${CS_DRY_RUN:-0}" = 1 ] && return 0
  tar -czf "$CS_OUT/${CS_ARCHIVE:-check}.tar.gz" -C "$CS_WORK" . 2>/dev/null
  echo "logs: $CS_OUT/${CS_ARCHIVE:-check}.tar.gz"
}
