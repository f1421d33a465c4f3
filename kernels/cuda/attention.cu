// CUDA: naive causal self-attention with the scores (preatt) and probabilities (att) materialized,
// B*NH*T*T elements each (formulas in attention.h; the CPU reference is cpu/attention.cpp).
//
// The four products per (batch b, head h) are cuBLAS strided-batched GEMMs. Head h of q, k, v is a
// [T, hs] row-major matrix inside qkv[b] with leading dimension W (a qkv row: C + 2*NKV*hs, 3C for
// multi-head attention), and the next head starts hs elements further on: no copy or permutation
// is needed. As in matmul.cu, a row-major X[r, c] is the column-major X^T[c, r], so each row-major
// product Y = A @ B is issued as Y^T = B^T @ A^T. All sizes are 64-bit until handed to cuBLAS.
//
// Grouped K/V heads (attention_heads.h): query head h = g*group + m (member m of K/V head g's
// group) reads K/V head g. Each product is one call per batch b and member m, batched over the
// NKV K/V heads: K/V head g (stride hs) with query head g*group + m (stride group*hs) and its
// score matrix (stride group*T*T). K and V are read in place, never repeated. dk and dv sum over
// the members: the first call writes them (beta = 0), the next ones add (beta = 1), in member
// order (deterministic); in 16 bits each call rounds the running sum. With NKV = NH (group = 1)
// these are the one call per batch over its NH heads of multi-head attention.
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
  int T, hs, C, W;            // sequence length, head size, channels, a qkv row (qkv's leading dimension)
  int NKV;                    // K/V heads = the batch count of each strided-batched GEMM
  std::size_t group;          // query heads per K/V head: one call per member
  std::size_t k_col, v_col;   // where the k heads and the v heads start in a qkv row: C, C + NKV*hs
  long long head_stride;      // hs: from one K/V head to the next inside a row
  long long q_stride;         // group*hs: from a member of one group to the same member of the next
  long long scores_stride;    // group*T*T: the same, between their score matrices
  std::size_t qkv_batch;      // T*W: from one batch element of qkv to the next
  std::size_t act_batch;      // T*C: from one batch element of out/dout to the next
  std::size_t scores_batch;   // NH*T*T: from one batch element of preatt/att to the next
  std::size_t member_scores;  // T*T: from member m's score matrix to member m+1's
};

Shapes make_shapes(std::size_t T, std::size_t C, std::size_t NH, std::size_t NKV, const char* op) {
  if (NH == 0 || C % NH != 0)
    throw std::invalid_argument(std::string(op) + ": C (" + std::to_string(C) + ") must be a multiple of NH (" +
                                std::to_string(NH) + ")");
  check_kv_heads(NH, NKV, op);
  NKV = kv_heads_or_all(NH, NKV);
  const std::size_t hs = C / NH, group = NH / NKV, W = C + 2 * NKV * hs;
  Shapes s{};
  s.T = detail::cublas_int(T, op);
  s.hs = detail::cublas_int(hs, op);
  s.C = detail::cublas_int(C, op);
  s.W = detail::cublas_int(W, op);
  s.NKV = detail::cublas_int(NKV, op);
  s.group = group;
  s.k_col = C;
  s.v_col = C + NKV * hs;
  s.head_stride = static_cast<long long>(hs);
  s.q_stride = static_cast<long long>(group * hs);
  s.scores_stride = static_cast<long long>(group * T * T);
  s.qkv_batch = T * W;
  s.act_batch = T * C;
  s.scores_batch = NH * T * T;
  s.member_scores = T * T;
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

template <typename T>
void attention_forward(void* stream, Out<T> out_, Out<T> preatt_, Out<T> att_, In<T> qkv_, std::size_t B,
                       std::size_t Tn, std::size_t C, std::size_t NH, std::size_t NKV) {
  check_kv_heads(NH, NKV, "attention_forward");
  if (B == 0 || Tn == 0 || C == 0) return;
  using D = detail::device_t<T>;
  D* out = detail::device_cast(out_);
  D* preatt = detail::device_cast(preatt_);
  D* att = detail::device_cast(att_);
  const D* qkv = detail::device_cast(qkv_);
  const Shapes s = make_shapes(Tn, C, NH, NKV, "attention_forward");
  cublasHandle_t handle = detail::cublas_handle(stream);
  const float scale = 1.0f / std::sqrt(static_cast<float>(C / NH));
  // preatt[b,h][t, u] = scale * q[t] . k[u]:  preatt^T[u, t] = (K^T)^T[u, i] @ Q^T[i, t]
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t m = 0; m < s.group; ++m) {  // query heads g*group + m, for every K/V head g
      const D* q = qkv + b * s.qkv_batch + m * s.hs;
      const D* k = qkv + b * s.qkv_batch + s.k_col;
      gemm_strided_batched<D>(handle, CUBLAS_OP_T, CUBLAS_OP_N, s.T, s.T, s.hs, scale, k, s.W, s.head_stride, q, s.W,
                              s.q_stride, 0.0f, preatt + b * s.scores_batch + m * s.member_scores, s.T,
                              s.scores_stride, s.NKV);
    }
  // att = causal softmax of preatt, row by row (and the masked future zeroed in both)
  const std::size_t rows = B * NH * Tn;
  causal_softmax_forward_kernel<<<detail::grid_for(rows, kWarpsPerBlock), kRowBlock, 0, detail::as_stream(stream)>>>(
      att, preatt, rows, Tn);
  CUDA_CHECK_LAUNCH("causal_softmax_forward_kernel");
  // out[b, t, h*hs + i] = sum_u att[b,h][t, u] v[u, i]:  out^T[i, t] = V^T[i, u] @ att^T[u, t]
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t m = 0; m < s.group; ++m) {
      const D* v = qkv + b * s.qkv_batch + s.v_col;
      gemm_strided_batched<D>(handle, CUBLAS_OP_N, CUBLAS_OP_N, s.hs, s.T, s.T, 1.0f, v, s.W, s.head_stride,
                              att + b * s.scores_batch + m * s.member_scores, s.T, s.scores_stride, 0.0f,
                              out + b * s.act_batch + m * s.hs, s.C, s.q_stride, s.NKV);
    }
}

template <typename T>
void attention_backward(void* stream, Out<T> dqkv_, Out<T> dscores_, In<T> dout_, In<T> qkv_, In<T> att_, std::size_t B,
                        std::size_t Tn, std::size_t C, std::size_t NH, std::size_t NKV) {
  check_kv_heads(NH, NKV, "attention_backward");
  if (B == 0 || Tn == 0 || C == 0) return;
  using D = detail::device_t<T>;
  D* dqkv = detail::device_cast(dqkv_);
  D* dscores = detail::device_cast(dscores_);
  const D* dout = detail::device_cast(dout_);
  const D* qkv = detail::device_cast(qkv_);
  const D* att = detail::device_cast(att_);
  const Shapes s = make_shapes(Tn, C, NH, NKV, "attention_backward");
  cublasHandle_t handle = detail::cublas_handle(stream);
  const float scale = 1.0f / std::sqrt(static_cast<float>(C / NH));
  // datt[b,h][t, u] = dout[t] . v[u]:  datt^T[u, t] = (V^T)^T[u, i] @ dout^T[i, t]
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t m = 0; m < s.group; ++m) {
      const D* v = qkv + b * s.qkv_batch + s.v_col;
      gemm_strided_batched<D>(handle, CUBLAS_OP_T, CUBLAS_OP_N, s.T, s.T, s.hs, 1.0f, v, s.W, s.head_stride,
                              dout + b * s.act_batch + m * s.hs, s.C, s.q_stride, 0.0f,
                              dscores + b * s.scores_batch + m * s.member_scores, s.T, s.scores_stride, s.NKV);
    }
  // dpreatt = att * (datt - rowsum(att * datt)), causal (zeros above the diagonal), in place in dscores
  const std::size_t rows = B * NH * Tn;
  causal_softmax_backward_kernel<<<detail::grid_for(rows, kWarpsPerBlock), kRowBlock, 0, detail::as_stream(stream)>>>(
      dscores, att, rows, Tn);
  CUDA_CHECK_LAUNCH("causal_softmax_backward_kernel");
  // dqkv is WRITTEN (never read before it is written): the GEMMs below cover every (b, t, head, i)
  // of its q, k and v parts (dk and dv by their member 0 with beta = 0), so no zero fill is needed.
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t m = 0; m < s.group; ++m) {
      const D* q = qkv + b * s.qkv_batch + m * s.hs;
      const D* k = qkv + b * s.qkv_batch + s.k_col;
      const D* dout_m = dout + b * s.act_batch + m * s.hs;
      const D* att_m = att + b * s.scores_batch + m * s.member_scores;
      const D* dpre_m = dscores + b * s.scores_batch + m * s.member_scores;
      D* dq = dqkv + b * s.qkv_batch + m * s.hs;
      D* dk = dqkv + b * s.qkv_batch + s.k_col;
      D* dv = dqkv + b * s.qkv_batch + s.v_col;
      const float beta = m == 0 ? 0.0f : 1.0f;  // dk, dv: the group's members summed in order
      // dq[t, i] = scale * sum_u dpreatt[t, u] k[u, i]:  dq^T[i, t] = K^T[i, u] @ dpreatt^T[u, t]
      gemm_strided_batched<D>(handle, CUBLAS_OP_N, CUBLAS_OP_N, s.hs, s.T, s.T, scale, k, s.W, s.head_stride, dpre_m,
                              s.T, s.scores_stride, 0.0f, dq, s.W, s.q_stride, s.NKV);
      // dk[u, i] (+)= scale * sum_t dpreatt[t, u] q[t, i]:  dk^T[i, u] = Q^T[i, t] @ (dpreatt^T)^T[t, u]
      gemm_strided_batched<D>(handle, CUBLAS_OP_N, CUBLAS_OP_T, s.hs, s.T, s.T, scale, q, s.W, s.q_stride, dpre_m, s.T,
                              s.scores_stride, beta, dk, s.W, s.head_stride, s.NKV);
      // dv[u, i] (+)= sum_t att[t, u] dout[t, i]:  dv^T[i, u] = dout^T[i, t] @ (att^T)^T[t, u]
      gemm_strided_batched<D>(handle, CUBLAS_OP_N, CUBLAS_OP_T, s.hs, s.T, s.T, 1.0f, dout_m, s.C, s.q_stride, att_m,
                              s.T, s.scores_stride, beta, dv, s.W, s.head_stride, s.NKV);
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
