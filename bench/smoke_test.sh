#!/usr/bin/env bash
# The main job in CI: dcomm-bench launches its own ranks, checks every result (-c 1; exits
# non-zero on any wrong element) and writes JSON that must parse and hold every size.
#   smoke_test.sh DCOMM_BENCH
set -euo pipefail
bench=$1
json=$(mktemp /tmp/dcomm-bench.XXXXXX.json)
trap 'rm -f "$json"' EXIT
for coll in all_reduce reduce_scatter all_gather broadcast reduce send_recv all_to_all; do
  "$bench" "$coll" -N 3 -b 8 -e 4M -f 8 -n 3 -w 1 -c 1 -d bf16 -M 1 -J "$json" >/dev/null
  python3 - "$json" "$coll" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["collective"] == sys.argv[2] and r["ranks"] == 3, r
sizes = {row["size"] for row in r["results"]}
assert len(r["results"]) == 2 * len(sizes) and len(sizes) >= 6, sizes
# In-place send_recv is a race by definition (nccl-tests reports N/A): not checked, null.
unchecked = lambda row: sys.argv[2] == "send_recv" and row["in_place"]
assert all((row["wrong"] is None if unchecked(row) else row["wrong"] == 0) and row["time_us"] > 0
           for row in r["results"]), r["results"]
assert r["staging_bytes_per_rank"] > 0
PY
done
# The training-step replays: every bucket and unit checked, one row, in place for DDP only.
# 3 ranks and odd sizes: units that do not split evenly are rounded, and the tiny bucket takes
# the direct path while the others take single copy or the ring.
for step in "ddp_step -B 1M,2x3M,7" "fsdp_step -B 3x1M,1K -R 1"; do
  # shellcheck disable=SC2086
  "$bench" $step -N 3 -n 2 -w 1 -c 1 -d bf16 -J "$json" >/dev/null
  python3 - "$json" "${step%% *}" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["collective"] == sys.argv[2] and r["ranks"] == 3, r
[row] = r["results"]
assert row["wrong"] == 0 and row["time_us"] > 0 and row["in_place"] == (sys.argv[2] == "ddp_step"), row
assert row["calls"] == (4 if sys.argv[2] == "ddp_step" else 8), row
PY
done
# Over UCX's TCP transport the ranks exit cleanly: no "UCX ERROR" (a rank whose endpoint close
# flushed towards a peer that had already destroyed its worker printed "error during flush:
# Endpoint timeout" in 3 runs of 4 at this size).
if command -v ucx_info >/dev/null; then
  for run in 1 2 3; do
    out=$(DCOMM_TRANSPORT=ucx UCX_TLS=tcp,self "$bench" all_reduce -N 2 -b 64M -e 64M -n 3 -w 1 -c 1 2>&1)
    if grep -q "UCX  *ERROR" <<<"$out"; then
      echo "dcomm-bench over UCX (tcp): UCX reported an error (run $run):"
      grep "UCX  *ERROR" <<<"$out"
      exit 1
    fi
  done
fi
echo "dcomm-bench smoke test: 7 collectives and 2 training steps checked; UCX over TCP exits cleanly"
