#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (ctest labels: unit, ranks, procs, vm, build,
# fuzz, slow; extra arguments go to ctest, e.g. -L procs or -LE slow).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
cd build
ctest --output-on-failure --timeout 900 "$@"
