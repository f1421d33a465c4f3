// CUDA: naive causal self-attention with the scores (preatt) and probabilities (att) materialized,
// B*NH*T*T elements each (formulas in attention.h; the CPU reference is cpu/attention.cpp).
//
// The four products per (batch b, head h) are cuBLAS strided-batched GEMMs, one call per batch b
// over its NH heads. Head h of q, k, v is a [T, hs] row-major matrix inside qkv[b] with leading
// dimension 3C, and the next head starts hs floats further on (stride hs): no copy or permutation
// is needed. As in matmul.cu, a row-major X[r, c] is the column-major X^T[c, r], so each row-major
// product Y = A @ B is issued as Y^T = B^T @ A^T. All sizes are 64-bit until handed to cuBLAS.
//
// The GEMMs compute all T x T scores, the future (u > t) included; the softmax kernels then write
// the causal result: att = preatt = 0 above the diagonal (forward), datt = dpreatt = 0 there
// (backward). Since those zeros multiply v, k and q in the following GEMMs, the full-width
// products equal the causal sums.
//
// Storage types: everything is a template over the element type D of every array (float,
// __nv_bfloat16, __half; dtype.cuh). fp32 GEMMs are cublasSgemmStridedBatched (TF32 off); 16-bit
// ones cublasGemmStridedBatchedEx with fp32 accumulation (CUBLAS_COMPUTE_32F), each output rounded
// once. The softmax kernels widen to float, compute in float and round once. Unlike the CPU
// reference, which keeps a row in fp32 from the scores to the output, the 16-bit steps here meet
// through rounded arrays (preatt is rounded before the softmax reads it, att before the output
// GEMM, datt before the softmax backward): a few more 16-bit roundings in the chain.
#include <cublas_v2.h>

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/attention.h"
#include "kernels/cuda/cublas_handle.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/dtype.cuh"

namespace trainmem::kernels::cuda {

namespace {

constexpr unsigned kWarpsPerBlock = 8;
constexpr unsigned kRowBlock = kWarpsPerBlock * detail::kWarpSize;  // 256 threads

// Causal softmax of one row r = (b*NH + h)*T + t of preatt (one warp per row, t = r % T):
//   att[r, u] = exp(preatt[r, u] - max) / sum_{w <= t} exp(preatt[r, w] - max)   for u <= t
//   att[r, u] = preatt[r, u] = 0                                                 for u > t
// where max = max_{u <= t} preatt[r, u]. Lanes stride over u; warp w of block b takes rows
// b*8 + w, stepping by gridDim.x * 8 (the row is the same for all 32 lanes of a warp).
template <typename D>
__global__ void causal_softmax_forward_kernel(D* att, D* preatt, std::size_t rows, std::size_t T) {
  const unsigned lane = threadIdx.x % detail::kWarpSize;
  const std::size_t first_row = static_cast<std::size_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / detail::kWarpSize;
  const std::size_t row_step = static_cast<std::size_t>(gridDim.x) * kWarpsPerBlock;
  for (std::size_t r = first_row; r < rows; r += row_step) {
    const std::size_t t = r % T;
    D* pre = preatt + r * T;
    D* a = att + r * T;
    float maxval = -INFINITY;
    for (std::size_t u = lane; u <= t; u += detail::kWarpSize) maxval = fmaxf(maxval, detail::to_float(pre[u]));
    maxval = detail::warp_reduce(maxval, detail::MaxOp{});
    float sum = 0.0f;
    for (std::size_t u = lane; u <= t; u += detail::kWarpSize) sum += expf(detail::to_float(pre[u]) - maxval);
    sum = detail::warp_reduce(sum, detail::SumOp{});
    // Each lane writes only the elements u it read itself (u = lane, lane + 32, ...).
    for (std::size_t u = lane; u < T; u += detail::kWarpSize) {
      if (u <= t) {
        a[u] = detail::from_float<D>(expf(detail::to_float(pre[u]) - maxval) / sum);
      } else {
        a[u] = detail::from_float<D>(0.0f);
        pre[u] = detail::from_float<D>(0.0f);
      }
    }
  }
}

// Softmax backward of one row r = (b*NH + h)*T + t (one warp per row, t = r % T), in place in
// dscores (datt on entry, dpreatt on exit):
//   dpreatt[r, u] = att[r, u] * (datt[r, u] - sum_{w <= t} att[r, w] * datt[r, w])   for u <= t
//   dpreatt[r, u] = 0                                                                for u > t
// The warp's sum is complete before any lane writes, and each element is read and written by the
// same lane, so no lane overwrites a value another still reads. Same warp-to-row mapping as the
// forward.
template <typename D>
__global__ void causal_softmax_backward_kernel(D* dscores, const D* att, std::size_t rows, std::size_t T) {
  const unsigned lane = threadIdx.x % detail::kWarpSize;
  const std::size_t first_row = static_cast<std::size_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / detail::kWarpSize;
  const std::size_t row_step = static_cast<std::size_t>(gridDim.x) * kWarpsPerBlock;
  for (std::size_t r = first_row; r < rows; r += row_step) {
    const std::size_t t = r % T;
    const D* a = att + r * T;
    D* ds = dscores + r * T;  // datt on entry, dpreatt on exit
    float weighted = 0.0f;
    for (std::size_t u = lane; u <= t; u += detail::kWarpSize) weighted += detail::to_float(a[u]) * detail::to_float(ds[u]);
    // every lane has its share of the row's sum before any lane overwrites an element (in place:
    // each element is read and then written by the same lane)
    weighted = detail::warp_reduce(weighted, detail::SumOp{});
    for (std::size_t u = lane; u < T; u += detail::kWarpSize)
      ds[u] = detail::from_float<D>(u <= t ? detail::to_float(a[u]) * (detail::to_float(ds[u]) - weighted) : 0.0f);
  }
}

// The sizes every attention call hands to cuBLAS, checked once.
struct Shapes {
  int T, hs, C, C3;           // sequence length, head size, channels, 3C (qkv's leading dimension)
  int NH;                     // heads = the batch count of each strided-batched GEMM
  long long head_stride;      // hs: from one head to the next inside a row
  long long scores_stride;    // T*T: from one head's score matrix to the next
  std::size_t qkv_batch;      // T*3C: from one batch element of qkv to the next
  std::size_t act_batch;      // T*C: from one batch element of out/dout to the next
  std::size_t scores_batch;   // NH*T*T: from one batch element of preatt/att to the next
};

Shapes make_shapes(std::size_t T, std::size_t C, std::size_t NH, const char* op) {
  if (NH == 0 || C % NH != 0)
    throw std::invalid_argument(std::string(op) + ": C (" + std::to_string(C) + ") must be a multiple of NH (" +
                                std::to_string(NH) + ")");
  Shapes s{};
  s.T = detail::cublas_int(T, op);
  s.hs = detail::cublas_int(C / NH, op);
  s.C = detail::cublas_int(C, op);
  s.C3 = detail::cublas_int(3 * C, op);
  s.NH = detail::cublas_int(NH, op);
  s.head_stride = static_cast<long long>(C / NH);
  s.scores_stride = static_cast<long long>(T * T);
  s.qkv_batch = T * 3 * C;
  s.act_batch = T * C;
  s.scores_batch = NH * T * T;
  return s;
}

// One column-major strided-batched GEMM C = alpha op(A) op(B) + beta C on element type D, fp32
// accumulation: cublasSgemmStridedBatched for float, cublasGemmStridedBatchedEx (CUBLAS_COMPUTE_32F,
// output rounded once) for bf16 and fp16.
template <typename D>
void gemm_strided_batched(cublasHandle_t handle, cublasOperation_t trans_a, cublasOperation_t trans_b, int m, int n,
                          int k, float alpha, const D* A, int lda, long long stride_a, const D* B, int ldb,
                          long long stride_b, float beta, D* C, int ldc, long long stride_c, int batch) {
  if constexpr (std::is_same_v<D, float>) {
    CUBLAS_CHECK(cublasSgemmStridedBatched(handle, trans_a, trans_b, m, n, k, &alpha, A, lda, stride_a, B, ldb,
                                           stride_b, &beta, C, ldc, stride_c, batch));
  } else {
    constexpr cudaDataType_t type = std::is_same_v<D, __nv_bfloat16> ? CUDA_R_16BF : CUDA_R_16F;
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle, trans_a, trans_b, m, n, k, &alpha, A, type, lda, stride_a, B,
                                            type, ldb, stride_b, &beta, C, type, ldc, stride_c, batch,
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

}  // namespace

// Grouped K/V heads (NKV != NH) are not implemented on CUDA yet: refused.
static void refuse_grouped_kv_heads(std::size_t NH, std::size_t NKV, const char* op) {
  check_kv_heads(NH, NKV, op);
  if (kv_heads_or_all(NH, NKV) != NH)
    throw std::invalid_argument(std::string(op) + " (CUDA): grouped K/V heads (NKV = " + std::to_string(NKV) +
                                " < NH = " + std::to_string(NH) + ") are not implemented yet");
}

template <typename T>
void attention_forward(void* stream, Out<T> out_, Out<T> preatt_, Out<T> att_, In<T> qkv_, std::size_t B,
                       std::size_t Tn, std::size_t C, std::size_t NH, std::size_t NKV) {
  refuse_grouped_kv_heads(NH, NKV, "attention_forward");
  if (B == 0 || Tn == 0 || C == 0) return;
  using D = detail::device_t<T>;
  D* out = detail::device_cast(out_);
  D* preatt = detail::device_cast(preatt_);
  D* att = detail::device_cast(att_);
  const D* qkv = detail::device_cast(qkv_);
  const Shapes s = make_shapes(Tn, C, NH, "attention_forward");
  cublasHandle_t handle = detail::cublas_handle(stream);
  const float scale = 1.0f / std::sqrt(static_cast<float>(C / NH));
  // preatt[b,h][t, u] = scale * q[t] . k[u]:  preatt^T[u, t] = (K^T)^T[u, i] @ Q^T[i, t]
  for (std::size_t b = 0; b < B; ++b) {
    const D* q = qkv + b * s.qkv_batch;
    const D* k = q + C;
    gemm_strided_batched<D>(handle, CUBLAS_OP_T, CUBLAS_OP_N, s.T, s.T, s.hs, scale, k, s.C3, s.head_stride, q, s.C3,
                            s.head_stride, 0.0f, preatt + b * s.scores_batch, s.T, s.scores_stride, s.NH);
  }
  // att = causal softmax of preatt, row by row (and the masked future zeroed in both)
  const std::size_t rows = B * NH * Tn;
  causal_softmax_forward_kernel<<<detail::grid_for(rows, kWarpsPerBlock), kRowBlock, 0, detail::as_stream(stream)>>>(
      att, preatt, rows, Tn);
  CUDA_CHECK_LAUNCH("causal_softmax_forward_kernel");
  // out[b, t, h*hs + i] = sum_u att[b,h][t, u] v[u, i]:  out^T[i, t] = V^T[i, u] @ att^T[u, t]
  for (std::size_t b = 0; b < B; ++b) {
    const D* v = qkv + b * s.qkv_batch + 2 * C;
    gemm_strided_batched<D>(handle, CUBLAS_OP_N, CUBLAS_OP_N, s.hs, s.T, s.T, 1.0f, v, s.C3, s.head_stride,
                            att + b * s.scores_batch, s.T, s.scores_stride, 0.0f, out + b * s.act_batch, s.C,
                            s.head_stride, s.NH);
  }
}

template <typename T>
void attention_backward(void* stream, Out<T> dqkv_, Out<T> dscores_, In<T> dout_, In<T> qkv_, In<T> att_, std::size_t B,
                        std::size_t Tn, std::size_t C, std::size_t NH, std::size_t NKV) {
  refuse_grouped_kv_heads(NH, NKV, "attention_backward");
  if (B == 0 || Tn == 0 || C == 0) return;
  using D = detail::device_t<T>;
  D* dqkv = detail::device_cast(dqkv_);
  D* dscores = detail::device_cast(dscores_);
  const D* dout = detail::device_cast(dout_);
  const D* qkv = detail::device_cast(qkv_);
  const D* att = detail::device_cast(att_);
  const Shapes s = make_shapes(Tn, C, NH, "attention_backward");
  cublasHandle_t handle = detail::cublas_handle(stream);
  const float scale = 1.0f / std::sqrt(static_cast<float>(C / NH));
  // datt[b,h][t, u] = dout[t] . v[u]:  datt^T[u, t] = (V^T)^T[u, i] @ dout^T[i, t]
  for (std::size_t b = 0; b < B; ++b) {
    const D* v = qkv + b * s.qkv_batch + 2 * C;
    gemm_strided_batched<D>(handle, CUBLAS_OP_T, CUBLAS_OP_N, s.T, s.T, s.hs, 1.0f, v, s.C3, s.head_stride,
                            dout + b * s.act_batch, s.C, s.head_stride, 0.0f, dscores + b * s.scores_batch, s.T,
                            s.scores_stride, s.NH);
  }
  // dpreatt = att * (datt - rowsum(att * datt)), causal (zeros above the diagonal), in place in dscores
  const std::size_t rows = B * NH * Tn;
  causal_softmax_backward_kernel<<<detail::grid_for(rows, kWarpsPerBlock), kRowBlock, 0, detail::as_stream(stream)>>>(
      dscores, att, rows, Tn);
  CUDA_CHECK_LAUNCH("causal_softmax_backward_kernel");
  // dqkv is WRITTEN (beta = 0, never read): the three GEMMs below cover every (b, t, h, i) of its
  // q, k and v thirds, so no zero fill is needed.
  for (std::size_t b = 0; b < B; ++b) {
    const D* q = qkv + b * s.qkv_batch;
    const D* k = q + C;
    const D* dout_b = dout + b * s.act_batch;
    const D* att_b = att + b * s.scores_batch;
    const D* dpre_b = dscores + b * s.scores_batch;
    D* dq = dqkv + b * s.qkv_batch;
    D* dk = dq + C;
    D* dv = dq + 2 * C;
    // dq[t, i] = scale * sum_u dpreatt[t, u] k[u, i]:  dq^T[i, t] = K^T[i, u] @ dpreatt^T[u, t]
    gemm_strided_batched<D>(handle, CUBLAS_OP_N, CUBLAS_OP_N, s.hs, s.T, s.T, scale, k, s.C3, s.head_stride, dpre_b,
                            s.T, s.scores_stride, 0.0f, dq, s.C3, s.head_stride, s.NH);
    // dk[u, i] = scale * sum_t dpreatt[t, u] q[t, i]:  dk^T[i, u] = Q^T[i, t] @ (dpreatt^T)^T[t, u]
    gemm_strided_batched<D>(handle, CUBLAS_OP_N, CUBLAS_OP_T, s.hs, s.T, s.T, scale, q, s.C3, s.head_stride, dpre_b,
                            s.T, s.scores_stride, 0.0f, dk, s.C3, s.head_stride, s.NH);
    // dv[u, i] = sum_t att[t, u] dout[t, i]:  dv^T[i, u] = dout^T[i, t] @ (att^T)^T[t, u]
    gemm_strided_batched<D>(handle, CUBLAS_OP_N, CUBLAS_OP_T, s.hs, s.T, s.T, 1.0f, dout_b, s.C, s.head_stride, att_b,
                            s.T, s.scores_stride, 0.0f, dv, s.C3, s.head_stride, s.NH);
  }
}

#define TRAINMEM_INSTANTIATE(T)                                                                                      \
  template void attention_forward<T>(void*, Out<T>, Out<T>, Out<T>, In<T>, std::size_t, std::size_t, std::size_t,   \
                                     std::size_t, std::size_t);                                                      \
  template void attention_backward<T>(void*, Out<T>, Out<T>, In<T>, In<T>, In<T>, std::size_t, std::size_t,         \
                                      std::size_t, std::size_t, std::size_t);
TRAINMEM_INSTANTIATE(float)
TRAINMEM_INSTANTIATE(bf16)
TRAINMEM_INSTANTIATE(fp16)
#undef TRAINMEM_INSTANTIATE

}  // namespace trainmem::kernels::cuda
