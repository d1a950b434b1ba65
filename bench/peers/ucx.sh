#!/usr/bin/env bash
# dcomm over UCX against UCX's own ceiling on the same transport: for UCX_TLS=sm,self and
# tcp,self, `ucx_perftest -t tag_bw` (package ucx-utils; one process sends, one receives) at
# 16, 64 and 256 MiB, then dcomm-bench send_recv and all_reduce between 2 processes with
# DCOMM_TRANSPORT=ucx, and dcomm over ucx_perftest. dcomm's send_recv has both ranks send at
# once (a ring shift), so each direction shares the transport (and, over TCP, the two cores)
# with the other: build/bench/ucx-bidir (bench/peers/ucx_bidir.cpp) is UCX's figure for that
# shape, both processes sending and receiving at once, per direction; dcomm over it too.
#   bench/peers/ucx.sh [tls ...]      default: sm,self tcp,self
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -x build/bench/dcomm-bench ] || bash scripts/build.sh >/dev/null
command -v ucx_perftest >/dev/null || { echo "ucx.sh needs ucx_perftest (apt-get install ucx-utils)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ $# -gt 0 ] || set -- sm,self tcp,self
port=$((13000 + RANDOM % 5000))
for tls in "$@"; do
  for size in 16777216 67108864 268435456; do
    iters=$((20 * 16777216 / size + 3))
    UCX_TLS=$tls ucx_perftest -t tag_bw -s "$size" -n "$iters" -p "$port" >/dev/null 2>&1 &
    sleep 1
    UCX_TLS=$tls ucx_perftest 127.0.0.1 -t tag_bw -s "$size" -n "$iters" -p "$port" 2>/dev/null |
      awk -v s="$size" '/^Final:/ {print s, $6 * 1048576 / 1e9}' >>"$tmp/perftest.$tls"
    wait || true
    port=$((port + 1))
    UCX_TLS=$tls ./build/bench/ucx-bidir server 127.0.0.1 "$port" "$size" "$iters" &
    printf '%s %s\n' "$size" "$(UCX_TLS=$tls ./build/bench/ucx-bidir client 127.0.0.1 "$port" "$size" "$iters")" \
      >>"$tmp/bidir.$tls"
    wait || true
    port=$((port + 1))
  done
  for coll in send_recv all_reduce; do
    DCOMM_TRANSPORT=ucx UCX_TLS=$tls ./build/bench/dcomm-bench "$coll" -N 2 -b 16M -e 256M -f 4 -n 10 -w 2 -c 1 \
      >"$tmp/$coll.$tls" 2>/dev/null
  done
done
python3 - "$tmp" "$@" <<'PY'
import sys
tmp, tlss = sys.argv[1], sys.argv[2:]
def dcomm(path):  # size -> out-of-place busbw
    out = {}
    for line in open(path):
        f = line.split()
        if len(f) >= 13 and f[0].isdigit(): out[int(f[0])] = float(f[7])  # not UCX's own lines
    return out
def peer(path):  # size -> GB/s
    return {int(a): float(b) for a, b in (l.split() for l in open(path) if len(l.split()) == 2)}
print("# dcomm over UCX against UCX on the same UCX_TLS, 2 processes, GB/s per direction;")
print("# x: dcomm over tag_bw (ucx_perftest, one way), and over bidir (ucx-bidir, both ways at once)")
print(f"{'UCX_TLS':>9} {'size':>8} {'tag_bw':>7} {'bidir':>6} {'send_recv':>9} {'x':>5} {'x':>5}"
      f" {'all_reduce':>10} {'x':>5} {'x':>5}")
for tls in tlss:
    pt, bd = peer(f"{tmp}/perftest.{tls}"), peer(f"{tmp}/bidir.{tls}")
    sr, ar = dcomm(f"{tmp}/send_recv.{tls}"), dcomm(f"{tmp}/all_reduce.{tls}")
    nan = float("nan")
    for z in sorted(pt):
        p, b = pt[z], bd.get(z, nan)
        s, a = sr.get(z, nan), ar.get(z, nan)
        print(f"{tls:>9} {z >> 20:>4} MiB {p:7.2f} {b:6.2f} {s:9.2f} {s / p:5.2f} {s / b:5.2f}"
              f" {a:10.2f} {a / p:5.2f} {a / b:5.2f}")
PY
