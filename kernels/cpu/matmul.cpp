// CPU reference: the linear layer on OpenBLAS (row-major GEMMs; formulas in kernels/matmul.h).
#include "kernels/matmul.h"

#include <cblas.h>

namespace trainmem::kernels::cpu {

namespace {
// One name for sgemm and dgemm, so the templates below read as the formulas.
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, std::size_t M, std::size_t N, std::size_t K, float alpha,
          const float* A, std::size_t lda, const float* B, std::size_t ldb, float beta, float* C, std::size_t ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A,
              static_cast<int>(lda), B, static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, std::size_t M, std::size_t N, std::size_t K, double alpha,
          const double* A, std::size_t lda, const double* B, std::size_t ldb, double beta, double* C, std::size_t ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A,
              static_cast<int>(lda), B, static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}
}  // namespace

template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, std::size_t N, std::size_t C, std::size_t OC) {
  // out[N, OC] = inp[N, C] @ weight[OC, C]^T (+ bias)
  gemm(CblasNoTrans, CblasTrans, N, OC, C, T(1), inp, C, weight, C, T(0), out, OC);
  if (bias)
    for (std::size_t n = 0; n < N; ++n)
      for (std::size_t o = 0; o < OC; ++o) out[n * OC + o] += bias[o];
}

template <typename T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, std::size_t N,
                     std::size_t C, std::size_t OC) {
  // dinp[N, C] = dout[N, OC] @ weight[OC, C]
  if (dinp) gemm(CblasNoTrans, CblasNoTrans, N, C, OC, T(1), dout, OC, weight, C, T(0), dinp, C);
  // dweight[OC, C] += dout[N, OC]^T @ inp[N, C]
  gemm(CblasTrans, CblasNoTrans, OC, C, N, T(1), dout, OC, inp, C, T(1), dweight, C);
  if (dbias)
    for (std::size_t n = 0; n < N; ++n)
      for (std::size_t o = 0; o < OC; ++o) dbias[o] += dout[n * OC + o];
}

template void matmul_forward<float>(float*, const float*, const float*, const float*, std::size_t, std::size_t,
                                    std::size_t);
template void matmul_forward<double>(double*, const double*, const double*, const double*, std::size_t, std::size_t,
                                     std::size_t);
template void matmul_backward<float>(float*, float*, float*, const float*, const float*, const float*, std::size_t,
                                     std::size_t, std::size_t);
template void matmul_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                      std::size_t, std::size_t, std::size_t);

}  // namespace trainmem::kernels::cpu
