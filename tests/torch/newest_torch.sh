#!/usr/bin/env bash
# dcomm_torch on the newest torch (scripts/lib/pypi-venvs.sh names the version): torch from PyPI
# in a venv outside the clone (installed once per machine), dcomm_torch built against it the
# way users do (`pip install --no-build-isolation ./python`; CPU only: the CUDA build is
# compiled by torch2_compile and run by the GPU check), then run_checks.py under that Python.
# Skips (77) in one line when PyPI cannot be reached.
#   newest_torch.sh [run_checks.py arguments]     e.g. --parallel, --suite
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
source "$root/scripts/lib/pypi-venvs.sh"
rc=0
venv=$(torch_venv) || rc=$?
((rc == 0)) || exit $rc
# One build at a time (two tests may share the venv), and none while the sources are those
# of the last build (a hash of the package and the headers it includes).
exec 9>"$venv/.dcomm_torch.lock"
flock 9
hash=$(cd "$root" && find python/setup.py python/dcomm_torch include -type f ! -name '*.so' | LC_ALL=C sort | xargs cat | sha256sum | cut -c1-16)
if [ "$(cat "$venv/.dcomm_torch.hash" 2>/dev/null)" != "$hash" ]; then
  t0=$(date +%s)
  if ! (cd "$root" && DCOMM_TORCH_CUDA=0 MAX_JOBS=2 "$venv/bin/pip" install -q --no-build-isolation --no-deps ./python) \
      >"$venv/dcomm_torch-build.log" 2>&1; then
    tail -60 "$venv/dcomm_torch-build.log"
    echo "newest_torch: building dcomm_torch against torch $DCOMM_TORCH_NEWEST failed"
    exit 1
  fi
  echo "$hash" >"$venv/.dcomm_torch.hash"
  echo "newest_torch: dcomm_torch built against torch $DCOMM_TORCH_NEWEST in $(($(date +%s) - t0)) s"
fi
flock -u 9
cd /tmp  # so that `import dcomm_torch` is the installed package, not the source folder
exec "$venv/bin/python" "$root/tests/torch/run_checks.py" "$@"
