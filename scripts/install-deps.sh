#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build, test and benchmark dcomm.
# Idempotent: installs only missing packages (apt-get update only when something is missing).
#   install-deps.sh          everything the tests, peers and adapters need
#   install-deps.sh --bench  only what dcomm-bench on host memory needs (the README's first command)
set -euo pipefail
bench_only=(g++ cmake ninja-build pkg-config libssl-dev)
packages=(g++ cmake ninja-build pkg-config libssl-dev clang clang-format clang-tidy libclang-rt-14-dev doctest-dev libbenchmark-dev libhwloc-dev libucx-dev ucx-utils iperf3 libibverbs-dev rdma-core ibverbs-providers openmpi-bin libopenmpi-dev python3 python3-torch python3-dev python3-pip pybind11-dev libtorch-dev zlib1g-dev dataset-fashion-mnist slurm-wlm munge iproute2)
[ "${1:-}" = --bench ] && packages=("${bench_only[@]}")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "dcomm: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
