# Two "hosts": network namespaces $a and $b joined by a veth pair ($va in $a with
# $NETNS_NET.1, $vb in $b with $NETNS_NET.2), removed with $tmp at exit. POSIX sh; sourced by
# tests/netns/netns_test.sh and bench/peers/netns.sh (root and iproute2 needed).
: "${NETNS_NET:=10.214.0}"
a=dcns-a-$$ b=dcns-b-$$ va=dcnsa$$ vb=dcnsb$$
tmp=$(mktemp -d)
netns_cleanup() { ip netns del "$a" 2>/dev/null || true; ip netns del "$b" 2>/dev/null || true; rm -rf "$tmp"; }
trap netns_cleanup EXIT
ip netns add "$a"
ip netns add "$b"
ip link add "$va" type veth peer name "$vb"
ip link set "$va" netns "$a"
ip link set "$vb" netns "$b"
ip -n "$a" addr add "$NETNS_NET.1/24" dev "$va"
ip -n "$b" addr add "$NETNS_NET.2/24" dev "$vb"
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set "$va" up
ip -n "$b" link set "$vb" up
