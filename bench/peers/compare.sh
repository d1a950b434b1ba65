#!/usr/bin/env bash
# Side by side, in one run: dcomm-bench and OpenMPI's MPI_Allreduce (through mpi-bench) on the
# same sizes and rank count, float32 sum, buffers reused by both. Prints one table.
#   bench/peers/compare.sh [ranks] [collective]
set -euo pipefail
cd "$(dirname "$0")/../.."
ranks=${1:-2}
coll=${2:-all_reduce}
[ -x build/bench/dcomm-bench ] && [ -x build/bench/mpi-bench ] || bash scripts/build.sh >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpi_flags=(--allow-run-as-root --oversubscribe -np "$ranks")
./build/bench/dcomm-bench "$coll" -N "$ranks" -b 8 -e 256M -f 2 -n 20 -w 5 -c 1 >"$tmp/dcomm.txt"
mpirun "${mpi_flags[@]}" ./build/bench/mpi-bench "$coll" -b 8 -e 256M -f 2 -n 20 -w 5 >"$tmp/mpi.txt"
python3 - "$tmp/dcomm.txt" "$tmp/mpi.txt" "$ranks" "$coll" <<'PY'
import sys
dcomm, mpi = {}, {}
for line in open(sys.argv[1]):
    f = line.split()
    if line.startswith("#") or len(f) < 13: continue
    dcomm[int(f[0])] = (float(f[5]), float(f[7]), int(f[8]))   # out-of-place time, busbw, #wrong
for line in open(sys.argv[2]):
    f = line.split()
    if line.startswith("#") or len(f) < 4: continue
    mpi[int(f[0])] = (float(f[1]), float(f[3]))
print(f"# {sys.argv[4]}, {sys.argv[3]} ranks, float32 sum, out of place; time ratio = dcomm / OpenMPI (lower is better)")
print(f"{'size':>10} {'dcomm us':>10} {'dcomm GB/s':>10} {'OpenMPI us':>10} {'OpenMPI GB/s':>12} {'ratio':>6} {'#wrong':>6}")
def human(n):
    for unit, s in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= s and n % s == 0: return f"{n // s} {unit}"
    return f"{n} B"
for size in sorted(set(dcomm) & set(mpi)):
    (dt, db, w), (mt, mb) = dcomm[size], mpi[size]
    print(f"{human(size):>10} {dt:10.2f} {db:10.2f} {mt:10.2f} {mb:12.2f} {dt / mt:6.2f} {w:6d}")
PY
