#!/usr/bin/env bash
# dcomm over TCP between two "hosts" (network namespaces joined by a veth pair), side by side
# with Gloo over the same link: all_reduce float32 sum, 2 ranks, one per namespace. Needs root
# and iproute2. Optional netem on the link: NETEM="delay 20ms loss 1%" bench/peers/netns.sh
#   bench/peers/netns.sh [minbytes] [maxbytes]
set -euo pipefail
cd "$(dirname "$0")/../.."
min=${1:-1M}
max=${2:-256M}
[ "$(id -u)" -eq 0 ] || { echo "netns.sh needs root (ip netns)"; exit 77; }
[ -x build/bench/dcomm-bench ] || bash scripts/build.sh >/dev/null
NETNS_NET=10.213.0
. tests/netns/pair.sh
if [ -n "${NETEM:-}" ]; then
  # shellcheck disable=SC2086
  ip netns exec "$a" tc qdisc add dev "$va" root netem $NETEM
  # shellcheck disable=SC2086
  ip netns exec "$b" tc qdisc add dev "$vb" root netem $NETEM
fi
port=$((30000 + RANDOM % 10000))
run_pair() {  # $1: output file; the rest: the command, run once per namespace with rank env
  local out=$1
  shift
  ip netns exec "$a" env RANK=0 WORLD_SIZE=2 MASTER_ADDR=10.213.0.1 MASTER_PORT=$port DCOMM_RANK=0 DCOMM_WORLD_SIZE=2 \
    DCOMM_COMM_ID=10.213.0.1:$port DCOMM_SOCKET_IFNAME="$va" GLOO_SOCKET_IFNAME="$va" "$@" >"$out" &
  local pid=$!
  ip netns exec "$b" env RANK=1 WORLD_SIZE=2 MASTER_ADDR=10.213.0.1 MASTER_PORT=$port DCOMM_RANK=1 DCOMM_WORLD_SIZE=2 \
    DCOMM_COMM_ID=10.213.0.1:$port DCOMM_SOCKET_IFNAME="$vb" GLOO_SOCKET_IFNAME="$vb" "$@" >/dev/null
  wait "$pid"
  port=$((port + 7))
}
run_pair "$tmp/dcomm" ./build/bench/dcomm-bench all_reduce -b "$min" -e "$max" -f 2 -n 5 -w 1 -c 1
run_pair "$tmp/gloo" /usr/bin/python3 bench/peers/gloo_bench.py all_reduce -b "$min" -e "$max" -f 2 -n 5 -w 1
python3 - "$tmp/dcomm" "$tmp/gloo" "${NETEM:-none}" <<'PY'
import sys
d, g = {}, {}
for line in open(sys.argv[1]):
    f = line.split()
    if not line.startswith("#") and len(f) >= 13: d[int(f[0])] = (float(f[5]), float(f[7]), int(f[8]))
for line in open(sys.argv[2]):
    f = line.split()
    if not line.startswith("#") and len(f) >= 4: g[int(f[0])] = (float(f[1]), float(f[3]))
print(f"# all_reduce over TCP between two network namespaces (veth), 2 ranks, float32 sum, netem: {sys.argv[3]}")
print(f"{'size':>10} {'dcomm us':>11} {'GB/s':>6} {'gloo us':>11} {'GB/s':>6} {'busbw x':>7} {'#wrong':>6}")
for z in sorted(set(d) & set(g)):
    (dt, db, w), (gt, gb) = d[z], g[z]
    print(f"{z >> 20:>6} MiB {dt:11.1f} {db:6.2f} {gt:11.1f} {gb:6.2f} {db / gb:7.2f} {w:6d}")
PY
