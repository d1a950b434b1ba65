#!/usr/bin/env bash
# Installs what is missing, builds, and runs the all_reduce sweep (8 B to 256 MiB) over local
# ranks (2 by default; pass -N 4 etc.; any dcomm-bench flag is passed on).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh >/dev/null
./build/bench/dcomm-bench all_reduce -b 8 -e 256M -f 4 "$@"
