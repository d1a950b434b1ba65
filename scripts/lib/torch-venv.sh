# The newest torch on PyPI, in a venv kept outside the clone (sourced, bash). The one place
# that names its version: the torch 2.x backend tests, the NCCL-ABI load test and the fault-
# tolerance tests all use this venv, so it is installed once per machine (~2-3 min and 5.4 GB
# the first time) and reused by every later run.
#
#   torch_venv          prints the venv's directory, installing it first if needed; returns 77
#                       (and says so in one line) when PyPI cannot be reached
#   DCOMM_TORCH_NEWEST  the version (default below); DCOMM_VENV_ROOT where venvs live
#                       (default /var/cache/dcomm-venvs)

DCOMM_TORCH_NEWEST=${DCOMM_TORCH_NEWEST:-2.15.0}

torch_venv() {
  local root="${DCOMM_VENV_ROOT:-/var/cache/dcomm-venvs}"
  local venv="$root/torch-$DCOMM_TORCH_NEWEST"
  if [ -x "$venv/bin/python" ] && [ -f "$venv/.complete" ]; then
    echo "$venv"
    return 0
  fi
  mkdir -p "$root"
  rm -rf "$venv"
  echo "torch $DCOMM_TORCH_NEWEST: installing into $venv (once per machine)" >&2
  /usr/bin/python3 -m venv "$venv" >&2 || return 1
  # setuptools, wheel and pybind11 build dcomm_torch with --no-build-isolation; numpy torch wants;
  # expecttest its test suite needs (tests/torch/dist_suite.py).
  if ! "$venv/bin/pip" install -q --retries 2 --timeout 30 "torch==$DCOMM_TORCH_NEWEST" numpy setuptools wheel pybind11 expecttest \
      >"$root/pip-$DCOMM_TORCH_NEWEST.log" 2>&1; then
    echo "torch $DCOMM_TORCH_NEWEST: cannot install from PyPI (no registry?): skipped ($(tail -1 "$root/pip-$DCOMM_TORCH_NEWEST.log"))" >&2
    rm -rf "$venv"
    return 77
  fi
  touch "$venv/.complete"
  echo "$venv"
}
