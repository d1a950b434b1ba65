#!/bin/sh
# Ranks on two "hosts": network namespaces joined by a veth pair, one rank in each, over TCP
# and over UCX (its TCP transport), every collective checked bit for bit (dcomm-bench -c 1:
# a wrong element fails the run), and one-sided puts with signals (dcomm-test-worker next to
# the bench's build, or $DCOMM_NETNS_WORKER). With --netem the link also drops 1% of packets and delays
# each by 20 ms in each direction (tc netem), and the results must still be exact. And a rank
# killed mid-all_reduce, the survivors shrinking past it across the namespaces (dcomm-recovery).
#
#   tests/netns/netns_test.sh path/to/dcomm-bench [--netem]
#
# Needs root and iproute2. Exit status: 0 passed, 1 failed, 77 skipped (not root, or --netem
# asked where the kernel has no sch_netem: scripts/rdma-vm.sh runs it in a guest that has).
# POSIX sh, so that it runs in the minimal guest too.
set -eu
BENCH=$1
NETEM=${2:-}
[ "$(id -u)" -eq 0 ] || { echo "netns_test: needs root (ip netns); skipped"; exit 77; }
. "$(dirname "$0")/pair.sh"
out=$tmp
if [ "$NETEM" = "--netem" ]; then
  if ! ip netns exec "$a" tc qdisc add dev "$va" root netem delay 20ms loss 1% 2>/dev/null; then
    echo "netns_test: this kernel has no tc netem (sch_netem); skipped (scripts/rdma-vm.sh runs it with netem)"
    exit 77
  fi
  ip netns exec "$b" tc qdisc add dev "$vb" root netem delay 20ms loss 1%
  echo "netns_test: netem on both ends: delay 20ms, loss 1%"
fi
# Below the kernel's ephemeral range (32768 up): a port an earlier pair's outgoing connection
# took there (in TIME_WAIT) made the next store's bind fail with "Address already in use".
port=$((20000 + $$ % 10000))
failed=0
# One command on both namespaces (rank 0 in $a, rank 1 in $b): environment words, then the
# command; sets rc_a and rc_b, output in $out/a and $out/b.
run_pair() {
  ip netns exec "$a" env RANK=0 WORLD_SIZE=2 MASTER_ADDR=$NETNS_NET.1 MASTER_PORT=$port DCOMM_RANK=0 \
    DCOMM_WORLD_SIZE=2 DCOMM_COMM_ID=$NETNS_NET.1:$port DCOMM_SOCKET_IFNAME="$va" UCX_NET_DEVICES="$va" \
    DCOMM_TIMEOUT_MS=120000 "$@" >"$out/a" 2>&1 &
  pid=$!
  rc_b=0
  ip netns exec "$b" env RANK=1 WORLD_SIZE=2 MASTER_ADDR=$NETNS_NET.1 MASTER_PORT=$port DCOMM_RANK=1 \
    DCOMM_WORLD_SIZE=2 DCOMM_COMM_ID=$NETNS_NET.1:$port DCOMM_SOCKET_IFNAME="$vb" UCX_NET_DEVICES="$vb" \
    DCOMM_TIMEOUT_MS=120000 "$@" >"$out/b" 2>&1 || rc_b=$?
  rc_a=0
  wait "$pid" || rc_a=$?
  port=$((port + 7))
}
# One collective on both namespaces; $1: a label, then environment words, then dcomm-bench's args.
pair() {
  label=$1
  shift
  run_pair "$@"
  # And UCX said nothing wrong, at exit either (a close that flushed towards a peer whose
  # worker was gone printed "UCX ERROR ... error during flush").
  if [ "$rc_a" -eq 0 ] && [ "$rc_b" -eq 0 ] && grep -q "Out of bounds values : 0 OK" "$out/a" &&
    ! grep -q "UCX  *ERROR" "$out/a" "$out/b"; then
    echo "netns_test: ok     $label ($(grep -c '^ ' "$out/a") sizes, results exact; via $(sed -n 's/.*next rank via \([a-z]*\).*/\1/p' "$out/a"))"
  else
    echo "netns_test: FAILED $label (exit $rc_a / $rc_b)"
    # What each rank said, without the table (its rows and # lines): the reason, in few lines.
    grep -v '^#\|^  ' "$out/a" | tail -8 | sed 's/^/  rank 0: /'
    grep -v '^#\|^  ' "$out/b" | tail -8 | sed 's/^/  rank 1: /'
    echo "  rank 0's last row: $(grep '^  ' "$out/a" | tail -1)"
    failed=1
  fi
}
max=4M
[ "$NETEM" = "--netem" ] && max=1M
for coll in all_reduce reduce_scatter all_gather broadcast send_recv; do
  pair "tcp $coll" env DCOMM_TRANSPORT=tcp "$BENCH" $coll -b 8 -e $max -f 16 -n 2 -w 1 -c 1
done
# Messages from 64 bytes go as rendezvous, straight into the receiver's buffer.
pair "tcp send_recv, rendezvous" env DCOMM_TRANSPORT=tcp DCOMM_RENDEZVOUS_BYTES=64 "$BENCH" send_recv -b 8 -e $max \
  -f 16 -n 2 -w 1 -c 1
# One-sided puts with signals between the hosts: records on the wire's own socket, received
# into the window by the target's thread (tests/procs/worker.cpp checks every round's data).
WORKER=${DCOMM_NETNS_WORKER:-$(dirname "$BENCH")/../tests/dcomm-test-worker}
if [ -x "$WORKER" ]; then
  for memory in mem_alloc heap; do
    run_pair "$WORKER" one_sided $memory
    if [ "$rc_a" -eq 0 ] && [ "$rc_b" -eq 0 ]; then
      echo "netns_test: ok     one-sided put + signal, $memory window, 3 rounds checked"
    else
      echo "netns_test: FAILED one-sided put + signal, $memory window (exit $rc_a / $rc_b)"
      sed 's/^/  rank 0: /' "$out/a" | tail -5
      sed 's/^/  rank 1: /' "$out/b" | tail -5
      failed=1
    fi
  done
else
  echo "netns_test: no $WORKER; one-sided part skipped"
fi
# A rank killed mid-all_reduce with two ranks in each namespace (over TCP between them): the
# survivors shrink past it and sum exactly, then a new process joins (dcomm-recovery; rank 0,
# which served the first store, is the victim once). Its table says how long each step took.
RECOVERY=${DCOMM_NETNS_RECOVERY:-$(dirname "$BENCH")/dcomm-recovery}
if [ -x "$RECOVERY" ]; then
  for victim in 0 3; do
    if DCOMM_TIMEOUT_MS=120000 "$RECOVERY" --ranks 4 --victim $victim --transport tcp --netns "$a:$va,$b:$vb" \
      --master "$NETNS_NET.1" --reps 1 --count 65536 --grow >"$out/rec" 2>&1 &&
      grep -q "every survivor's results exact" "$out/rec"; then
      echo "netns_test: ok     rank $victim of 4 killed, 2 per namespace over TCP: shrink and grow, exact;" \
        "ms: $(grep '^ *0 ' "$out/rec" | tr -s ' ')"
    else
      echo "netns_test: FAILED rank $victim of 4 killed, 2 per namespace over TCP"
      grep -v WARN "$out/rec" | tail -15 | sed 's/^/  /'
      failed=1
    fi
  done
else
  echo "netns_test: no $RECOVERY; the kill-and-shrink part skipped"
fi
if "$BENCH" all_reduce -N 1 -b 8 -e 8 -n 1 -w 0 >/dev/null 2>&1 &&
   DCOMM_TRANSPORT=ucx UCX_TLS=tcp,self "$BENCH" all_reduce -N 2 -b 8 -e 8 -n 1 -w 0 >/dev/null 2>&1; then
  for coll in all_reduce reduce_scatter all_gather; do
    pair "ucx $coll" env DCOMM_TRANSPORT=ucx UCX_TLS=tcp,self "$BENCH" $coll -b 8 -e $max -f 16 -n 2 -w 1 -c 1
  done
  pair "ucx send_recv, rendezvous" env DCOMM_TRANSPORT=ucx UCX_TLS=tcp,self DCOMM_RENDEZVOUS_BYTES=64 "$BENCH" \
    send_recv -b 8 -e $max -f 16 -n 2 -w 1 -c 1
else
  echo "netns_test: dcomm-bench has no UCX transport here; UCX part skipped"
fi
exit $failed
