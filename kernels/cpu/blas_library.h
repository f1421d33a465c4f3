// The CPU GEMM library trainmem is built on, and the little it asks of it beyond the products
// (kernels/cpu/blas_gemm.h): its name, its kernel family on this CPU, and its thread count.
//
// Two libraries, chosen at build time (cmake/TrainmemCpuBlas.cmake, TRAINMEM_CPU_BLAS):
//   oneMKL, sequential layer   the default where ci/setup installed it: never threads a product
//                              itself; trainmem splits products over its own pool (matmul.cpp).
//                              Its kernel family is its CPU dispatch (MKL_ENABLE_INSTRUCTIONS or
//                              MKL_CBWR set another: the user's settings, never trainmem's).
//   OpenBLAS                   threads large products itself (blas_threads.h); its kernel family is
//                              its DYNAMIC_ARCH choice (OPENBLAS_CORETYPE sets another).
#pragma once
#include <string>

namespace trainmem::kernels::cpu {

struct BlasLibrary {
  std::string name;     // "oneMKL 2026.0.2" / "OpenBLAS 0.3.21"
  std::string kernels;  // the kernel family it runs on this CPU: "AVX-512 ..." / "SkylakeX"
};

// What this build links, as the library reports it about itself.
BlasLibrary blas_library();

// The library's own thread count (1 for oneMKL's sequential layer), and setting it (a no-op
// there). Only blas_threads.cpp calls these.
int blas_library_max_threads();
void blas_library_set_threads(int threads);

}  // namespace trainmem::kernels::cpu
