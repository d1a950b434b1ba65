#!/usr/bin/env bash
# Side by side, in one run: dcomm-bench and OpenMPI's MPI_Allreduce (through mpi-bench) on the
# same sizes and rank count, float32 sum, buffers reused by both. Each is run REPS times
# (default 3), alternating, and the table shows each size's median time: this machine is
# shared and one preemption can move a sub-microsecond mean.
#   bench/peers/compare.sh [ranks] [collective] [reps]
set -euo pipefail
cd "$(dirname "$0")/../.."
ranks=${1:-2}
coll=${2:-all_reduce}
reps=${3:-3}
[ -x build/bench/dcomm-bench ] && [ -x build/bench/mpi-bench ] || bash scripts/build.sh >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpi_flags=(--allow-run-as-root --oversubscribe -np "$ranks")
for rep in $(seq "$reps"); do
  # Small sizes take many iterations, large ones 20.
  for pass in "-b 8 -e 1M -n 1000 -w 50" "-b 2M -e 256M -n 20 -w 5"; do
    # shellcheck disable=SC2086
    ./build/bench/dcomm-bench "$coll" -N "$ranks" $pass -f 2 -c 1 >>"$tmp/dcomm.$rep"
    # shellcheck disable=SC2086
    mpirun "${mpi_flags[@]}" ./build/bench/mpi-bench "$coll" $pass -f 2 >>"$tmp/mpi.$rep"
  done
done
python3 - "$tmp" "$reps" "$ranks" "$coll" <<'PY'
import statistics, sys
tmp, reps = sys.argv[1], int(sys.argv[2])
dcomm, mpi, wrong = {}, {}, {}
for rep in range(1, reps + 1):
    for line in open(f"{tmp}/dcomm.{rep}"):
        f = line.split()
        if line.startswith("#") or len(f) < 13: continue
        size = int(f[0])
        dcomm.setdefault(size, []).append(float(f[5]))        # out-of-place time (us)
        wrong[size] = wrong.get(size, 0) + int(f[8]) + int(f[12])
    for line in open(f"{tmp}/mpi.{rep}"):
        f = line.split()
        if line.startswith("#") or len(f) < 4: continue
        mpi.setdefault(int(f[0]), []).append(float(f[1]))
ranks, coll = int(sys.argv[3]), sys.argv[4]
factor = {"all_reduce": 2 * (ranks - 1) / ranks, "broadcast": 1.0}.get(coll, (ranks - 1) / ranks)
print(f"# {coll}, {ranks} ranks, float32 sum, out of place, median of {reps} runs; "
      f"ratio = dcomm time / OpenMPI time (lower is better)")
print(f"{'size':>10} {'dcomm us':>10} {'dcomm GB/s':>10} {'OpenMPI us':>10} {'OpenMPI GB/s':>12} {'ratio':>6} {'#wrong':>6}")
def human(n):
    for unit, s in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= s and n % s == 0: return f"{n // s} {unit}"
    return f"{n} B"
for size in sorted(set(dcomm) & set(mpi)):
    dt, mt = statistics.median(dcomm[size]), statistics.median(mpi[size])
    db, mb = size / dt / 1e3 * factor, size / mt / 1e3 * factor
    print(f"{human(size):>10} {dt:10.2f} {db:10.2f} {mt:10.2f} {mb:12.2f} {dt / mt:6.2f} {wrong[size]:6d}")
PY
