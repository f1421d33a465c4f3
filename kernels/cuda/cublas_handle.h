// The cuBLAS handle the CUDA kernels share (defined in matmul.cu; attention.cu uses it too).
#pragma once
#include <cublas_v2.h>

#include <cstddef>

namespace trainmem::kernels::cuda::detail {

// This thread's handle for the current device, created on first use with TF32 off
// (CUBLAS_DEFAULT_MATH: fp32 GEMMs stay fp32, as the CPU reference computes them) and bound to
// `stream` (a cudaStream_t; nullptr = the default stream) before it is returned.
cublasHandle_t cublas_handle(void* stream);

// cuBLAS takes int sizes: n as an int, or std::invalid_argument naming `what`.
int cublas_int(std::size_t n, const char* what);

}  // namespace trainmem::kernels::cuda::detail
