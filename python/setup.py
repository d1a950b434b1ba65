"""Builds dcomm_torch against the installed torch, with torch's own extension tooling.

    pip install --no-build-isolation ./python      (a venv, or --break-system-packages on Debian)

C++20 (dcomm is a C++20 header library, in ../include). With a CUDA build of torch and nvcc
at hand the CUDA path is built too (DCOMM_TORCH_CUDA=0 turns it off; DCOMM_TORCH_CUDA=1
insists)."""
import os
import shutil

from setuptools import setup
import torch
from torch.utils import cpp_extension

here = os.path.dirname(os.path.abspath(__file__))
include = os.path.normpath(os.path.join(here, "..", "include"))
if not os.path.isdir(os.path.join(include, "dcomm")):
    include = os.path.join(here, "dcomm_torch", "include")  # an sdist carries the headers

want_cuda = os.environ.get("DCOMM_TORCH_CUDA", "auto")
have_cuda = torch.version.cuda is not None and (cpp_extension.CUDA_HOME is not None or shutil.which("nvcc"))
cuda = want_cuda == "1" or (want_cuda == "auto" and have_cuda)
if want_cuda == "1" and not have_cuda:
    raise SystemExit("DCOMM_TORCH_CUDA=1 but torch has no CUDA or nvcc is missing")

csrc = os.path.join("dcomm_torch", "csrc")
sources = [os.path.join(csrc, f) for f in ("module.cpp", "process_group.cpp", "collectives.cpp", "work.cpp", "backend_hooks.cpp", "window.cpp")]
cxx = ["-std=c++20", "-O3", "-g0", "-Wno-deprecated-declarations"]
# The symbols of static archives linked in stay inside the module: a toolchain that links its
# own libstdc++ statically (the GPU machine's /opt/gcc did) would otherwise export that copy's
# locale and stream internals, the process's libstdc++ (torch's) would bind to one half and
# this module to the other, and the first ostringstream crashed (the first H200 run).
link = ["-Wl,--exclude-libs,ALL"]
macros = []
# DCOMM_TORCH_PREBUILT: a static archive of the CUDA build's sources that need no Python
# (process_group.cpp, collectives.cpp, work.cpp, backend_hooks.cpp, window.cpp, cuda_path.cpp, device_glue.cu), compiled against this same torch's
# headers (tests/torch/torch2_compile.sh makes it for the GPU check): only module.cpp is
# compiled here, against this Python.
prebuilt = os.environ.get("DCOMM_TORCH_PREBUILT")
if cuda:
    macros.append(("DCOMM_TORCH_CUDA", "1"))
    arch = os.environ.get("DCOMM_TORCH_CUDA_ARCH", "90")
    nvcc = ["-std=c++20", "-O3", "--expt-relaxed-constexpr", "-diag-suppress=2810,20011,20014",
            f"-gencode=arch=compute_{arch},code=sm_{arch}"]
    extra_objects = []
    if prebuilt:
        sources = [os.path.join(csrc, "module.cpp")]
        extra_objects = [prebuilt]
    else:
        sources += [os.path.join(csrc, "cuda_path.cpp"), os.path.join(csrc, "device_glue.cu")]
    ext = cpp_extension.CUDAExtension("dcomm_torch._C", sources, include_dirs=[include], define_macros=macros,
                                      extra_compile_args={"cxx": cxx, "nvcc": nvcc}, libraries=["crypto"],
                                      extra_objects=extra_objects, extra_link_args=link)
else:
    ext = cpp_extension.CppExtension("dcomm_torch._C", sources, include_dirs=[include], define_macros=macros,
                                     extra_compile_args=cxx, libraries=["crypto"], extra_link_args=link)

setup(
    name="dcomm_torch",
    version="0.1.0",
    description="dcomm as a torch.distributed backend (backend='dcomm')",
    packages=["dcomm_torch"],
    ext_modules=[ext],
    cmdclass={"build_ext": cpp_extension.BuildExtension.with_options(use_ninja=True)},
    zip_safe=False,
)
