// One name for the CPU GEMM library's row-major sgemm and dgemm (oneMKL's or OpenBLAS's CBLAS,
// kernels/cpu/blas_library.h), so that the kernels read as their formulas:
//
//   C[M, N] = alpha * op(A)[M, K] @ op(B)[K, N] + beta * C      op(X) = X, or X^T if transposed
//
// A, B and C are row-major with leading dimensions lda, ldb, ldc (elements from one stored row to
// the next). The thread count the library uses is set by the caller (kernels/cpu/blas_threads.h).
#pragma once
#if TRAINMEM_CPU_BLAS_MKL
#include <mkl_cblas.h>
#else
#include <cblas.h>
#endif

#include <cstddef>

namespace trainmem::kernels::cpu {

inline void blas_gemm(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K, float alpha,
                      const float* A, std::size_t lda, const float* B, std::size_t ldb, float beta, float* C,
                      std::size_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A, static_cast<int>(lda), B,
              static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}

inline void blas_gemm(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K, double alpha,
                      const double* A, std::size_t lda, const double* B, std::size_t ldb, double beta, double* C,
                      std::size_t ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A, static_cast<int>(lda), B,
              static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}

}  // namespace trainmem::kernels::cpu
