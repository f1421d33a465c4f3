// blas_library.h for oneMKL and for OpenBLAS: the one file that calls either library's own API
// (the products go through blas_gemm.h's CBLAS calls, which both have).
#include "kernels/cpu/blas_library.h"

#if TRAINMEM_CPU_BLAS_MKL
#include <mkl.h>
#else
#include <cblas.h>
#endif

#include <string>

namespace trainmem::kernels::cpu {

#if TRAINMEM_CPU_BLAS_MKL
BlasLibrary blas_library() {
  MKLVersion v{};
  mkl_get_version(&v);
  return {"oneMKL " + std::to_string(v.MajorVersion) + "." + std::to_string(v.MinorVersion) + "." +
              std::to_string(v.UpdateVersion) + ", sequential",
          v.Processor ? v.Processor : ""};
}
int blas_library_max_threads() { return 1; }
void blas_library_set_threads(int) {}
#else
BlasLibrary blas_library() {
  // openblas_get_config(): "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY SkylakeX MAX_THREADS=64".
  std::string config = openblas_get_config();
  const std::string::size_type end = config.find(' ', config.find(' ') + 1);
  return {config.substr(0, end), openblas_get_corename()};
}
int blas_library_max_threads() { return openblas_get_num_threads(); }
void blas_library_set_threads(int threads) { openblas_set_num_threads(threads); }
#endif

}  // namespace trainmem::kernels::cpu
