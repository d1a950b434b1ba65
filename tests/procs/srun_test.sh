#!/usr/bin/env bash
# Runs the worker under a real srun: starts a private one-node Slurm (slurmctld + slurmd, in a
# temporary directory, on its own ports), runs `srun -n RANKS worker ARGS`, and stops it.
# Needs root and slurm-wlm + munge (scripts/install-deps.sh installs them); exits 77 (ctest's
# skip) without them.
#   srun_test.sh RANKS WORKER [ARGS...]
set -euo pipefail
ranks=$1
shift
if [ "$(id -u)" -ne 0 ] || ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  echo "skipped: a private Slurm needs root, slurmctld, slurmd and munged"
  exit 77
fi
dir=$(mktemp -d /tmp/dcomm-slurm.XXXXXX)
port=$((47000 + RANDOM % 2000))
cleanup() {
  for pid in "$dir/slurmctld.pid" "$dir/slurmd.pid"; do [ -f "$pid" ] && kill "$(cat "$pid")" 2>/dev/null || true; done
  sleep 0.5
  rm -rf "$dir"
}
trap cleanup EXIT
host=$(hostname)
mkdir -p "$dir/state" "$dir/spool"
cat >"$dir/slurm.conf" <<CONF
ClusterName=dcomm
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldPort=$port
SlurmdPort=$((port + 1))
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
NodeName=$host CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
export SLURM_CONF=$dir/slurm.conf
if ! pgrep -x munged >/dev/null; then
  mkdir -p /run/munge && chown munge:munge /run/munge 2>/dev/null || true
  munged --force
fi
slurmctld -c
slurmd
for _ in $(seq 300); do  # up to a minute: slurmd registers slowly on a loaded machine
  [ "$(sinfo -h -o %t 2>/dev/null)" = "idle" ] && break
  sleep 0.2
done
timeout 300 srun -n "$ranks" --overcommit "$@"
