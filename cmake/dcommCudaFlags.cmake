# nvcc flags of dcomm::cuda, for the build tree and the installed package: C++20 (CMake 3.25
# does not know that CUDA 13 has cuda_std_20); std::min/max in device code; and quiet about
# assignments from [[nodiscard]] types (2810) and about host calls in __host__ __device__
# templates (and their lambdas) instantiated with the host primitives, which only the host
# runs (20011, 20014).
set(DCOMM_CUDA_FLAGS -std=c++20 --expt-relaxed-constexpr -diag-suppress=2810,20011,20014)
