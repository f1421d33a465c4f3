// Error checks for the CUDA kernels (kernels/cuda/ only). Every failure becomes a
// std::runtime_error that names the call, the error and file:line, instead of a silent wrong result.
//
//   CUDA_CHECK(cudaMemsetAsync(...));        // a CUDA runtime call
//   CUBLAS_CHECK(cublasSgemm(...));          // a cuBLAS call (the status name, e.g. CUBLAS_STATUS_INVALID_VALUE)
//   kernel<<<grid, block, 0, stream>>>(...);
//   CUDA_CHECK_LAUNCH("gelu_forward");       // after EVERY kernel launch: a bad configuration shows here
//
// Launch errors (bad grid, too much shared memory) appear at once; errors inside a kernel (an
// illegal address) appear at the next synchronizing call, wherever it is.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace trainmem::kernels::cuda::detail {

[[noreturn]] inline void throw_cuda_error(cudaError_t status, const char* what, const char* file, int line) {
  throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + what + " failed: " +
                           cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
}

[[noreturn]] inline void throw_cublas_error(cublasStatus_t status, const char* what, const char* file, int line) {
  throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + what + " failed: " +
                           cublasGetStatusName(status) + " (" + cublasGetStatusString(status) + ")");
}

inline void check_cuda(cudaError_t status, const char* what, const char* file, int line) {
  if (status != cudaSuccess) throw_cuda_error(status, what, file, line);
}

inline void check_cublas(cublasStatus_t status, const char* what, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) throw_cublas_error(status, what, file, line);
}

}  // namespace trainmem::kernels::cuda::detail

#define CUDA_CHECK(call) ::trainmem::kernels::cuda::detail::check_cuda((call), #call, __FILE__, __LINE__)
#define CUBLAS_CHECK(call) ::trainmem::kernels::cuda::detail::check_cublas((call), #call, __FILE__, __LINE__)
// cudaGetLastError also clears a launch error, so the next check does not report it again.
#define CUDA_CHECK_LAUNCH(kernel_name) \
  ::trainmem::kernels::cuda::detail::check_cuda(cudaGetLastError(), "launch of " kernel_name, __FILE__, __LINE__)
