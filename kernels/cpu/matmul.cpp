// CPU reference: the linear layer on the CPU GEMM library (oneMKL or OpenBLAS, kernels/cpu/blas_library.h;
// row-major GEMMs; formulas in kernels/matmul.h).
// float and double call sgemm/dgemm on the buffers themselves; bf16 and fp16 go through the
// bounded fp32 staging tiles described in matmul.h (gemm_staged below). On OpenBLAS a large product
// runs on as many OpenBLAS threads as kernels/cpu/blas_threads.h gives its size; a smaller one, and
// on oneMKL's sequential layer every one, is split over the cores by us, in blocks of rows fixed by
// its shape (gemm below).
#include "kernels/matmul.h"

#include "kernels/cpu/blas_gemm.h"
#include "kernels/cpu/blas_threads.h"
#include "kernels/cpu/parallel_for.h"

#include <algorithm>
#include <vector>

namespace trainmem::kernels::cpu {

namespace {
// When a product is split over the cores by rows (see gemm): into at most kGemmBlocks blocks, of at
// least kGemmMinBlockRows rows, a multiple of 16 (sgemm's register tile is 16 rows on Haswell).
// Each block repacks all of op(B), so fewer, larger blocks cost less on one thread (64-row blocks
// made small's step 5% slower on one thread than one call per product; 4 blocks fill 2 or 4 cores).
constexpr std::size_t kGemmBlocks = 4, kGemmMinBlockRows = 64;

// The rows of one block, a function of M alone (so the bits do not depend on the thread count).
std::size_t gemm_block_rows(std::size_t M) {
  const std::size_t quarter = (M + kGemmBlocks - 1) / kGemmBlocks;
  return std::max(kGemmMinBlockRows, (quarter + 15) / 16 * 16);
}
// Multiply-adds below which a second thread is not worth waking (about 80 us of sgemm; waking a
// pool worker costs a few microseconds, more on a loaded machine: kernels/cpu/parallel_for.cpp).
constexpr double kGemmMinMnkPerThread = 2.0 * 1024 * 1024;

// C[M, N] = alpha op(A) @ op(B) + beta C. A product that the policy of blas_threads.h gives
// OpenBLAS's threads is made by one threaded call. Any other is split by us instead, as OpenBLAS
// would leave the second core idle and oneMKL's sequential layer never threads: C's rows in blocks (gemm_block_rows), each block
// its own one-thread product (its rows of op(A) with all of op(B)), the blocks over the cores
// (parallel_for). The blocks depend on M alone and each block's sum over K is OpenBLAS's for that
// shape, so the bits do not depend on the thread count.
template <typename F>
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, std::size_t M, std::size_t N, std::size_t K, F alpha, const F* A,
          std::size_t lda, const F* B, std::size_t ldb, F beta, F* C, std::size_t ldc) {
  const bool trans_a = ta == CblasTrans, trans_b = tb == CblasTrans;
  if (blas_threads_for(M, N, K) > 1) {
    use_blas_threads_for(M, N, K);
    blas_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  use_one_blas_thread();
  const std::size_t block_rows = gemm_block_rows(M), blocks = (M + block_rows - 1) / block_rows;
  const double block_mnk = static_cast<double>(block_rows) * static_cast<double>(N) * static_cast<double>(K);
  const auto min_blocks_per_thread = static_cast<std::size_t>(kGemmMinMnkPerThread / std::max(block_mnk, 1.0)) + 1;
  parallel_for(blocks, min_blocks_per_thread, [&](std::size_t begin, std::size_t end) {
    for (std::size_t block = begin; block < end; ++block) {
      const std::size_t m0 = block * block_rows, rows = std::min(block_rows, M - m0);
      const F* a_rows = trans_a ? A + m0 : A + m0 * lda;  // rows m0.. of op(A): stored columns if transposed
      blas_gemm(trans_a, trans_b, rows, N, K, alpha, a_rows, lda, B, ldb, beta, C + m0 * ldc, ldc);
    }
  });
}

// dst[r * cols + c] = src[r * ld + c] widened, for a rows x cols block of a row-major matrix.
template <typename T>
void widen_block(float* dst, const T* src, std::size_t rows, std::size_t cols, std::size_t ld) {
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) dst[r * cols + c] = load(src[r * ld + c]);
}

// A row-major matrix as stored, and whether the product reads it transposed: op(X) = X or X^T.
template <typename T>
struct Operand {
  const T* data;
  std::size_t ld;  // elements from one stored row to the next
  bool transposed;
  // The stored block holding rows [r0, r0 + rows) x columns [c0, c0 + cols) of op(X), widened into
  // dst, row-major as stored (so sgemm is told the same transpose): op(X)'s block, or its transpose.
  void widen(float* dst, std::size_t r0, std::size_t rows, std::size_t c0, std::size_t cols) const {
    if (transposed) widen_block(dst, data + c0 * ld + r0, cols, rows, ld);
    else widen_block(dst, data + r0 * ld + c0, rows, cols, ld);
  }
  CBLAS_TRANSPOSE blas() const { return transposed ? CblasTrans : CblasNoTrans; }
};

// out[M, N] (+)= op(A)[M, K] @ op(B)[K, N] (+ bias[N] on every row), in 16 bits through fp32 tiles:
// for every output tile, an fp32 accumulator is started by the first K slice's sgemm (beta = 0),
// or from the widened old value when `accumulate`; every K slice of A and B is widened into
// staging and summed in by sgemm (beta = 1), the bias is added, and the tile is rounded into
// `out` once.
// Staging: at most kMatmulTileRows*kMatmulTileInner + kMatmulTileInner*kMatmulTileCols +
// kMatmulTileRows*kMatmulTileCols floats, whatever M, N and K.
template <typename T>
void gemm_staged(std::size_t M, std::size_t N, std::size_t K, const Operand<T>& A, const Operand<T>& B, T* out,
                 std::size_t ld_out, bool accumulate, const T* bias) {
  const std::size_t mt_max = std::min(M, kMatmulTileRows), nt_max = std::min(N, kMatmulTileCols),
                    kt_max = std::min(K, kMatmulTileInner);
  std::vector<float> a(mt_max * kt_max), b(kt_max * nt_max), acc(mt_max * nt_max);
  for (std::size_t m0 = 0; m0 < M; m0 += kMatmulTileRows)
    for (std::size_t n0 = 0; n0 < N; n0 += kMatmulTileCols) {
      const std::size_t mt = std::min(kMatmulTileRows, M - m0), nt = std::min(kMatmulTileCols, N - n0);
      if (accumulate) widen_block(acc.data(), out + m0 * ld_out + n0, mt, nt, ld_out);
      else if (K == 0) std::fill(acc.begin(), acc.end(), 0.0f);  // an empty sum (no slice to start it)
      for (std::size_t k0 = 0; k0 < K; k0 += kMatmulTileInner) {
        const std::size_t kt = std::min(kMatmulTileInner, K - k0);
        A.widen(a.data(), m0, mt, k0, kt);  // op(A)[m0.., k0..]: stored as mt x kt, or kt x mt when transposed
        B.widen(b.data(), k0, kt, n0, nt);  // op(B)[k0.., n0..]
        const float beta = accumulate || k0 > 0 ? 1.0f : 0.0f;  // the first slice of a written output starts it
        gemm(A.blas(), B.blas(), mt, nt, kt, 1.0f, a.data(), A.transposed ? mt : kt, b.data(),
             B.transposed ? kt : nt, beta, acc.data(), nt);
      }
      for (std::size_t i = 0; i < mt; ++i)
        for (std::size_t j = 0; j < nt; ++j) {
          float value = acc[i * nt + j];
          if (bias) value += load(bias[n0 + j]);
          out[(m0 + i) * ld_out + n0 + j] = store<T>(value);
        }
    }
}

// dbias[OC] += sum over the N rows of dout[N, OC], summed in fp32 row by row (as the fp32 path),
// in column chunks of `chunk` accumulators, each rounded once.
template <typename T>
void bias_grad_staged(T* dbias, const T* dout, std::size_t N, std::size_t OC, std::size_t chunk) {
  std::vector<float> acc(std::min(OC, chunk));
  for (std::size_t o0 = 0; o0 < OC; o0 += chunk) {
    const std::size_t count = std::min(chunk, OC - o0);
    for (std::size_t j = 0; j < count; ++j) acc[j] = load(dbias[o0 + j]);
    for (std::size_t n = 0; n < N; ++n)
      for (std::size_t j = 0; j < count; ++j) acc[j] += load(dout[n * OC + o0 + j]);
    for (std::size_t j = 0; j < count; ++j) dbias[o0 + j] = store<T>(acc[j]);
  }
}
}  // namespace

template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, std::size_t N, std::size_t C, std::size_t OC) {
  if constexpr (is_16bit_v<T>) {
    // out[N, OC] = inp[N, C] @ (weight[OC, C])^T + bias
    gemm_staged<T>(N, OC, C, {inp, C, false}, {weight, C, true}, out, OC, /*accumulate=*/false, bias);
  } else {
    // out[N, OC] = inp[N, C] @ weight[OC, C]^T (+ bias)
    gemm(CblasNoTrans, CblasTrans, N, OC, C, T(1), inp, C, weight, C, T(0), out, OC);
    if (bias)
      for (std::size_t n = 0; n < N; ++n)
        for (std::size_t o = 0; o < OC; ++o) out[n * OC + o] += bias[o];
  }
}

template <typename T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, std::size_t N,
                     std::size_t C, std::size_t OC) {
  if constexpr (is_16bit_v<T>) {
    // dinp[N, C] = dout[N, OC] @ weight[OC, C]
    if (dinp) gemm_staged<T>(N, C, OC, {dout, OC, false}, {weight, C, false}, dinp, C, false, nullptr);
    // dweight[OC, C] += (dout[N, OC])^T @ inp[N, C]: the sum over all N rows stays fp32 until rounded
    gemm_staged<T>(OC, C, N, {dout, OC, true}, {inp, C, false}, dweight, C, /*accumulate=*/true, nullptr);
    if (dbias) bias_grad_staged(dbias, dout, N, OC, kMatmulTileRows * kMatmulTileCols);
  } else {
    // dinp[N, C] = dout[N, OC] @ weight[OC, C]
    if (dinp) gemm(CblasNoTrans, CblasNoTrans, N, C, OC, T(1), dout, OC, weight, C, T(0), dinp, C);
    // dweight[OC, C] += dout[N, OC]^T @ inp[N, C]
    gemm(CblasTrans, CblasNoTrans, OC, C, N, T(1), dout, OC, inp, C, T(1), dweight, C);
    if (dbias)
      for (std::size_t n = 0; n < N; ++n)
        for (std::size_t o = 0; o < OC; ++o) dbias[o] += dout[n * OC + o];
  }
}

#define TRAINMEM_INSTANTIATE(T)                                                                                   \
  template void matmul_forward<T>(T*, const T*, const T*, const T*, std::size_t, std::size_t, std::size_t);      \
  template void matmul_backward<T>(T*, T*, T*, const T*, const T*, const T*, std::size_t, std::size_t, std::size_t);
TRAINMEM_INSTANTIATE(float)
TRAINMEM_INSTANTIATE(double)
TRAINMEM_INSTANTIATE(bf16)
TRAINMEM_INSTANTIATE(fp16)
#undef TRAINMEM_INSTANTIATE

}  // namespace trainmem::kernels::cpu
