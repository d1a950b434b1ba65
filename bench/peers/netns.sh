#!/usr/bin/env bash
# dcomm over TCP between two "hosts" (network namespaces joined by a veth pair), side by side
# with the peers on the same link, one rank in each namespace:
#   1. all_reduce float32 sum against Gloo, median of RUNS (3) runs of each;
#   2. send_recv (both ranks send at once) against iperf3 --bidir with as many streams as dcomm
#      stripes a peer over (DCOMM_SOCKETS_PER_PEER, 2), per direction;
#   3. 8-byte send_recv latency against a plain one-socket ping-pong (tcp-pingpong).
# Needs root and iproute2 (iperf3 for part 2). Optional netem on the link:
#   NETEM="delay 20ms loss 1%" bench/peers/netns.sh [minbytes] [maxbytes]
set -euo pipefail
cd "$(dirname "$0")/../.."
min=${1:-1M}
max=${2:-256M}
runs=${RUNS:-3}
streams=${DCOMM_SOCKETS_PER_PEER:-2}
[ "$(id -u)" -eq 0 ] || { echo "netns.sh needs root (ip netns)"; exit 77; }
[ -x build/bench/dcomm-bench ] && [ -x build/bench/tcp-pingpong ] || bash scripts/build.sh >/dev/null
NETNS_NET=10.213.0
. tests/netns/pair.sh
if [ -n "${NETEM:-}" ]; then
  # shellcheck disable=SC2086
  ip netns exec "$a" tc qdisc add dev "$va" root netem $NETEM
  # shellcheck disable=SC2086
  ip netns exec "$b" tc qdisc add dev "$vb" root netem $NETEM
fi
# Below the kernel's ephemeral range (32768 up), as tests/netns/netns_test.sh.
port=$((20000 + RANDOM % 10000))
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
for r in $(seq "$runs"); do  # alternated, so a noisy spell hits both alike
  run_pair "$tmp/dcomm.$r" ./build/bench/dcomm-bench all_reduce -b "$min" -e "$max" -f 2 -n 5 -w 1 -c 1
  run_pair "$tmp/gloo.$r" /usr/bin/python3 bench/peers/gloo_bench.py all_reduce -b "$min" -e "$max" -f 2 -n 5 -w 1
done
run_pair "$tmp/sendrecv" ./build/bench/dcomm-bench send_recv -b 16M -e 256M -f 4 -n 5 -w 1 -c 1
run_pair "$tmp/latency" ./build/bench/dcomm-bench send_recv -b 8 -e 8 -n 20000 -w 1000 -c 1
if command -v iperf3 >/dev/null; then
  ip netns exec "$a" iperf3 -s -1 -B 10.213.0.1 -p "$port" >/dev/null &
  sleep 0.5
  ip netns exec "$b" iperf3 -c 10.213.0.1 -p "$port" --bidir -P "$streams" -t 5 -J >"$tmp/iperf3" || true
  wait || true
fi
ip netns exec "$a" ./build/bench/tcp-pingpong server 10.213.0.1 $((port + 1)) 20000 &
ip netns exec "$b" ./build/bench/tcp-pingpong client 10.213.0.1 $((port + 1)) 20000 >"$tmp/pingpong"
wait
python3 - "$tmp" "$runs" "${NETEM:-none}" "$streams" <<'PY'
import json, statistics, sys
tmp, runs, netem, streams = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def dcomm(path):  # size -> (us, busbw, #wrong) of the out-of-place columns
    out = {}
    for line in open(path):
        f = line.split()
        if not line.startswith("#") and len(f) >= 13: out[int(f[0])] = (float(f[5]), float(f[7]), int(f[8]))
    return out
def gloo(path):
    out = {}
    for line in open(path):
        f = line.split()
        if not line.startswith("#") and len(f) >= 4: out[int(f[0])] = (float(f[1]), float(f[3]))
    return out
d = [dcomm(f"{tmp}/dcomm.{r}") for r in range(1, runs + 1)]
g = [gloo(f"{tmp}/gloo.{r}") for r in range(1, runs + 1)]
print(f"# 1. all_reduce over TCP between two network namespaces (veth), 2 ranks, float32 sum, netem: {netem}; "
      f"median of {runs} runs")
print(f"{'size':>10} {'dcomm us':>11} {'GB/s':>6} {'gloo us':>11} {'GB/s':>6} {'busbw x':>7} {'#wrong':>6}")
for z in sorted(set.intersection(*(set(x) for x in d + g))):
    dt = statistics.median(x[z][0] for x in d); db = statistics.median(x[z][1] for x in d)
    gt = statistics.median(x[z][0] for x in g); gb = statistics.median(x[z][1] for x in g)
    wrong = sum(x[z][2] for x in d)
    print(f"{z >> 20:>6} MiB {dt:11.1f} {db:6.2f} {gt:11.1f} {gb:6.2f} {db / gb:7.2f} {wrong:6d}")
sr = dcomm(f"{tmp}/sendrecv")
per_dir = None
try:
    end = json.load(open(f"{tmp}/iperf3"))["end"]
    per_dir = (end["sum_sent"]["bits_per_second"] + end["sum_sent_bidir_reverse"]["bits_per_second"]) / 2 / 8e9
except Exception as e:  # no iperf3, or it failed
    print(f"# iperf3: no result ({e})")
print(f"# 2. send_recv, both ranks sending at once; iperf3 --bidir -P {streams}: GB/s per direction")
print(f"{'size':>10} {'dcomm us':>11} {'GB/s':>6} {'iperf3':>7} {'x':>6} {'#wrong':>6}")
for z in sorted(sr):
    us, bw, wrong = sr[z]
    ratio = f"{bw / per_dir:6.2f}" if per_dir else "     -"
    ip = f"{per_dir:7.2f}" if per_dir else "      -"
    print(f"{z >> 20:>6} MiB {us:11.1f} {bw:6.2f} {ip} {ratio} {wrong:6d}")
lat = dcomm(f"{tmp}/latency")[8][0]
pp = float(open(f"{tmp}/pingpong").read())
print("# 3. 8-byte latency: dcomm send_recv (both ways at once) against half a plain TCP ping-pong's round trip")
print(f"dcomm {lat:.1f} us   ping-pong {pp:.1f} us   x {lat / pp:.2f}")
PY
