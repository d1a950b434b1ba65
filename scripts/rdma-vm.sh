#!/bin/bash
# Real RDMA verbs without RDMA hardware: boots Debian 12's kernel under qemu (software
# emulation; no /dev/kvm needed) with Soft-RoCE (rdma_rxe) on the guest's NIC, runs dcomm's
# verbs tests, the verbs benchmark next to perftest's ib_write_lat / ib_write_bw, and the
# network-namespace tests with tc netem loss and delay (tests/netns/netns_test.sh) inside it,
# and exits with their status.
#
#   sudo scripts/rdma-vm.sh [build-dir]     default build-dir: build (configured and built)
#   (ctest runs it as the test rdma_vm, label vm, with DCOMM_VM_ONLY=tests: the tests without
#   the measurements; exit 77 = skipped, when not root; DCOMM_VM_ONLY=bench: the measurements)
#
# The first run builds the guest (a Debian kernel from `apt-get download`, a debootstrap
# minbase root with rdma-core, perftest and UCX, packed as an initramfs): about 3-4 minutes,
# root and the Debian mirror needed. It is cached in $DCOMM_VM_CACHE (default
# /var/cache/dcomm-rdma-vm); later runs need neither and take about a minute or two (boot
# ~15 s, then the tests; emulated Soft-RoCE is slow: ~0.3 Gb/s, ~10 us a write).
# The test binaries are the host's (Debian 12 too), placed in the guest at the same paths.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
CACHE=${DCOMM_VM_CACHE:-/var/cache/dcomm-rdma-vm}
LIMIT=${DCOMM_VM_TIMEOUT:-900}
MIRROR=${DCOMM_VM_MIRROR:-http://deb.debian.org/debian}
MODULES="rdma_rxe ib_uverbs rdma_ucm ib_umad virtio_net virtio_pci veth crc32_generic configfs sch_netem"

say() { echo "rdma-vm: $*" >&2; }
[ "$(id -u)" = 0 ] || { say "needs root (debootstrap, and the guest image in $CACHE); skipped"; exit 77; }

need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v zstd >/dev/null || need+=(zstd)
command -v cpio >/dev/null || need+=(cpio)
command -v depmod >/dev/null || need+=(kmod)
if [ ${#need[@]} -gt 0 ]; then
  say "installing ${need[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

build_image() {  # steps left half done by an interrupted run are picked up in $CACHE.new
  mkdir -p "$CACHE.new" && cd "$CACHE.new"
  if [ ! -f kernel.done ]; then
    rm -rf kernel ./*.deb && mkdir kernel
    local pkg
    pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
    say "kernel package $pkg"
    (cd /tmp && apt-get download -qq "$pkg" 2>/dev/null && mv /tmp/"$pkg"_*.deb "$CACHE.new"/)
    dpkg -x ./*.deb kernel
    depmod -b kernel "$(ls kernel/lib/modules)"  # the package leaves modules.dep to its postinst
    cp kernel/boot/vmlinuz-* vmlinuz
    touch kernel.done
  fi
  local ver
  ver=$(ls kernel/lib/modules)
  if [ ! -f rootfs.done ]; then
    rm -rf rootfs
    say "debootstrap bookworm minbase (a few minutes)"
    debootstrap --variant=minbase \
      --include=rdma-core,ibverbs-providers,ibverbs-utils,perftest,iproute2,kmod,libucx0,procps \
      bookworm rootfs "$MIRROR" >debootstrap.log 2>&1 || { tail -20 debootstrap.log >&2; exit 1; }
    rm -rf rootfs/var/cache/apt/archives/*.deb rootfs/usr/share/doc rootfs/usr/share/man rootfs/usr/share/locale
    touch rootfs.done
  fi
  # Only the modules the guest needs, with their dependencies (modules.dep).
  local src=kernel/lib/modules/$ver dst=rootfs/lib/modules/$ver want seen=" " m f d
  want=$MODULES
  rm -rf "$dst" && mkdir -p "$dst"
  while [ -n "$want" ]; do
    m=${want%% *}
    if [ "$m" = "$want" ]; then want=""; else want=${want#* }; fi
    case "$seen" in *" $m "*) continue ;; esac
    seen="$seen$m "
    f=$(grep -E "(^|/)$(echo "$m" | sed 's/[_-]/[_-]/g')\.ko(\.xz|\.zst)?:" "$src/modules.dep" | head -1) || true
    [ -n "$f" ] || continue  # built into the kernel
    mkdir -p "$dst/$(dirname "${f%%:*}")" && cp "$src/${f%%:*}" "$dst/${f%%:*}"
    for d in ${f#*:}; do want="$want $(basename "${d%%.ko*}")"; want=${want# }; done
  done
  cp "$src"/modules.order "$src"/modules.builtin* "$dst"/ 2>/dev/null || true
  depmod -b rootfs "$ver"
  say "packing the guest root ($(ls -R "$dst" | grep -c '\.ko') modules)"
  (cd rootfs && find . | cpio -o -H newc --quiet | zstd -q -10 -T0 -o ../rootfs.cpio.zst -f)
  mkdir -p "$CACHE.final" && mv rootfs.cpio.zst vmlinuz "$CACHE.final"/
  cd / && rm -rf "$CACHE" && mv "$CACHE.final" "$CACHE" && rm -rf "$CACHE.new"
  say "guest image cached in $CACHE ($(du -sh "$CACHE" | cut -f1))"
}
[ -f "$CACHE/rootfs.cpio.zst" ] && [ -f "$CACHE/vmlinuz" ] || build_image

# This run's files: the test binaries at their host paths, the netns test, and /init.
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
for f in tests/test_ranks tests/test_procs tests/dcomm-test-worker bench/dcomm-bench bench/dcomm-recovery; do
  [ -x "$BUILD/$f" ] || { say "$BUILD/$f is missing: build first (scripts/build.sh)"; exit 2; }
  mkdir -p "$STAGE$BUILD/$(dirname $f)" && cp "$BUILD/$f" "$STAGE$BUILD/$f"
done
mkdir -p "$STAGE$ROOT/tests/netns" && cp "$ROOT"/tests/netns/*.sh "$STAGE$ROOT/tests/netns/"
# DCOMM_VM_CMD: a shell command the guest runs instead of the tests and the benchmark (for
# experiments; BUILD is the build directory there, the binaries at their host paths).
[ -z "${DCOMM_VM_CMD:-}" ] || printf 'BUILD=%s\n%s\n' "$BUILD" "$DCOMM_VM_CMD" >"$STAGE/vm-cmd.sh"
cat >"$STAGE/init" <<EOF
#!/bin/sh
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mkdir -p /dev/shm /tmp /run && mount -t tmpfs -o size=512m shm /dev/shm  # /tmp stays: the binaries may live there
mount -t configfs none /sys/kernel/config 2>/dev/null
for m in $MODULES; do modprobe \$m 2>/dev/null; done
ip link set lo up; ip link set eth0 up; ip addr add 10.0.2.15/24 dev eth0
rdma link add rxe0 type rxe netdev eth0
ulimit -l unlimited
cd /tmp
run() { echo "=== \$*"; t0=\$(date +%s); "\$@"; rc=\$?; echo "=== exit \$rc: \$1 (\$((\$(date +%s) - t0)) s)"; [ \$rc = 0 ] || status=1; }
status=0
ibv_devices
if [ -f /vm-cmd.sh ]; then sh /vm-cmd.sh; echo "DCOMM-VM-STATUS \$?"; echo o >/proc/sysrq-trigger; sleep 5; fi
if [ "${DCOMM_VM_ONLY:-}" != bench ]; then  # DCOMM_VM_ONLY=bench: the measurements only
run $BUILD/tests/test_ranks -tc='verbs*'
run $BUILD/tests/test_procs -tc='*verbs*'
# A rank killed mid-all_reduce over verbs: the survivors shrink past it (rank 0 once) and a new
# process joins; every result exact.
run $BUILD/bench/dcomm-recovery --transport verbs --ranks 3 --victim 0 --reps 1 --count 65536 --grow
run $BUILD/bench/dcomm-recovery --transport verbs --ranks 4 --victim 2 --mode abort --reps 1 --count 65536
fi
if [ "${DCOMM_VM_ONLY:-}" != tests ]; then  # DCOMM_VM_ONLY=tests: no measurements (ctest)
echo "=== verbs latency and bandwidth: perftest on rxe0 (loopback), then dcomm-bench over verbs"
(ib_write_lat -d rxe0 -x 1 -n 200 >/tmp/lat.srv 2>&1 &) ; sleep 1; ib_write_lat -d rxe0 -x 1 -n 200 10.0.2.15 | tail -4
(ib_write_bw -d rxe0 -x 1 -s 16777216 -n 20 >/tmp/bw.srv 2>&1 &) ; sleep 1; ib_write_bw -d rxe0 -x 1 -s 16777216 -n 20 10.0.2.15 | tail -4
echo "=== both directions at once, as dcomm's send_recv (BW is the sum of the two)"
(ib_write_bw -b -d rxe0 -x 1 -s 16777216 -n 20 >/tmp/bw.srv 2>&1 &) ; sleep 1; ib_write_bw -b -d rxe0 -x 1 -s 16777216 -n 20 10.0.2.15 | tail -4
run env DCOMM_TRANSPORT=verbs $BUILD/bench/dcomm-bench all_reduce -N 2 -b 8 -e 4M -f 8 -n 10 -w 1
run env DCOMM_TRANSPORT=verbs $BUILD/bench/dcomm-bench send_recv -N 2 -b 8 -e 16M -f 8 -n 10 -w 1
echo "=== 8-byte send_recv: the waiting ranks poll their queue pairs; proxies polling too (2000), then sleeping (0)"
run env DCOMM_TRANSPORT=verbs DCOMM_PROXY_SPIN_US=2000 $BUILD/bench/dcomm-bench send_recv -N 2 -b 8 -e 8 -n 200 -w 10
run env DCOMM_TRANSPORT=verbs DCOMM_PROXY_SPIN_US=0 $BUILD/bench/dcomm-bench send_recv -N 2 -b 8 -e 8 -n 200 -w 10
echo "=== two ib_write_lat pairs at once (4 polling processes on the guest's 2 emulated CPUs): Soft-RoCE's"
echo "=== kernel work waits for a CPU; dcomm's exchange has 2 polling ranks and 2 messages in flight at once"
(ib_write_lat -d rxe0 -x 1 -n 200 >/tmp/lat.srv 2>&1 &); (ib_write_lat -d rxe0 -x 1 -p 18600 -n 200 >/tmp/lat2.srv 2>&1 &); sleep 1
(ib_write_lat -d rxe0 -x 1 -p 18600 -n 200 10.0.2.15 >/tmp/lat2.cli 2>&1 &); ib_write_lat -d rxe0 -x 1 -n 200 10.0.2.15 | tail -2
sleep 2; tail -2 /tmp/lat2.cli
echo "=== the same call over shared memory in this guest: what the call itself costs under emulation, no NIC"
run env DCOMM_TRANSPORT=shm $BUILD/bench/dcomm-bench send_recv -N 2 -b 8 -e 8 -n 200 -w 10
fi
echo "=== registration refused: ranks as nobody with ulimit -l 1024 (kB): the FIFOs fit, 1-4 MiB buffers do not;"
echo "=== the rendezvous goes through the FIFOs' registered memory, exact, said once per process"
(ulimit -l 1024; exec setpriv --reuid=65534 --regid=65534 --clear-groups env DCOMM_TRANSPORT=verbs \
  DCOMM_SLOT_BYTES=65536 DCOMM_SLOTS=4 $BUILD/bench/dcomm-bench send_recv -N 2 -b 1M -e 4M -f 2 -n 3 -w 1) >/tmp/fb.log 2>&1
rc=\$?; cat /tmp/fb.log; said=\$(grep -c "copied through the FIFOs" /tmp/fb.log)
if [ \$rc = 0 ] && [ \$said -ge 1 ] && [ \$said -le 2 ]; then echo "=== fallback ok (said \$said times)"
else echo "=== fallback FAILED: exit \$rc, said \$said times"; status=1; fi
[ "${DCOMM_VM_ONLY:-}" = bench ] || run sh $ROOT/tests/netns/netns_test.sh $BUILD/bench/dcomm-bench --netem
echo "DCOMM-VM-STATUS \$status"
echo o >/proc/sysrq-trigger
sleep 5
EOF
chmod +x "$STAGE/init"
chmod 755 "$STAGE"  # the guest's / (ranks run as nobody too)
(cd "$STAGE" && find . | cpio -o -H newc --quiet) >"$STAGE.cpio"
# Two uncompressed archives back to back (the kernel unpacks both; it would not find the
# second after a compressed first).
{ zstd -dc "$CACHE/rootfs.cpio.zst"; cat "$STAGE.cpio"; } >"$STAGE.img"
rm -f "$STAGE.cpio"
trap 'rm -rf "$STAGE" "$STAGE.img"' EXIT

say "booting (limit ${LIMIT}s)"
LOG=${DCOMM_VM_LOG:-/tmp/dcomm-rdma-vm.log}
start=$(date +%s)
timeout "$LIMIT" qemu-system-x86_64 -m 2G -smp 2 -nographic -no-reboot \
  -kernel "$CACHE/vmlinuz" -initrd "$STAGE.img" -append "console=ttyS0 rdinit=/init quiet panic=-1" \
  -netdev user,id=n0 -device virtio-net-pci,netdev=n0 </dev/null | tee "$LOG" | grep -v "^\[" || true
status=$(grep -a "DCOMM-VM-STATUS" "$LOG" | tail -1 | awk '{print $2}' | tr -d '\r')
say "done in $(($(date +%s) - start)) s; log in $LOG"
[ -n "$status" ] || { say "the guest did not report (timed out or crashed)"; exit 1; }
exit "$status"
