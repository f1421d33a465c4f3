// Flash attention v2: the v1 forward with 2D register tiling (still fp32 FMAs, no tensor cores).
//
// What it adds over v1, and why it is faster:
//   - More work per thread, and each shared-memory load used several times. v1 gives each
//     thread one query row, so every K or V value it reads from shared memory feeds one FMA.
//     Here a block of 128 threads owns 64 query rows and walks over tiles of 32 keys; thread
//     (rg, kg) = (tid / 8, tid % 8) computes a 4 x 4 block of the scores (rows 4rg..4rg+3, keys
//     4kg..4kg+3) from one float4 of Q^T and one float4 of K^T per channel: 2 loads for 16 FMAs
//     instead of 2 for 1. Then it computes a 4 x D/8 block of P V the same way (a float4 of P^T
//     and D/32 float4s of V per key).
//   - 64 query rows share each K/V tile (v1: 32), so K and V are read from global memory half
//     as often per query row, with 16-byte vector loads.
//   - The 8 threads that share a row are 8 consecutive lanes: the row max and row sum are 3
//     shuffles (xor 1, 2, 4), no shared memory.
//   - exp2f with log2(e) folded into the query scale (one FFMA + the MUFU ex2 per score,
//     instead of expf's range reduction); lse is converted back with ln 2 at the end.
//   - Causal: the query tiles with the most key tiles are launched first.
// Shared memory holds fp32 copies (converted once per tile, not once per use): Q^T and K^T
// transposed so that a thread's 4 rows (or 4 keys) of one channel are one float4.
//
// Backward: v2 has none of its own; version 2's backward is v3's (tensor cores), the best one
// available (flash_attention.cu maps it).
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/flash_attention_internal.cuh"

namespace trainmem::kernels::cuda::flash {

namespace {

constexpr int kBr = 64;       // query rows per block
constexpr int kBc = 32;       // keys per tile
constexpr int kThreads = 128;  // 16 row groups x 8 key groups
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <int D>
constexpr std::size_t smem_bytes() {
  return sizeof(float) * (D * kBr + D * kBc + kBc * D + kBc * kBr);  // Q^T, K^T, V, P^T
}

// 8 consecutive 16-bit values (16 bytes, one load) widened to fp32.
template <typename E>
__device__ __forceinline__ void load8(float (&x)[8], const std::uint16_t* p) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const std::uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    x[2 * i] = E::load(static_cast<std::uint16_t>(w[i] & 0xffffu));
    x[2 * i + 1] = E::load(static_cast<std::uint16_t>(w[i] >> 16));
  }
}

template <typename E, int D>
__global__ void __launch_bounds__(kThreads) forward_kernel(std::uint16_t* __restrict__ out, float* __restrict__ lse,
                                                           const std::uint16_t* __restrict__ qkv, Dims d) {
  extern __shared__ __align__(16) float smem[];
  float* qT = smem;            // [D][kBr]  queries * scale * log2 e, transposed
  float* kT = qT + D * kBr;    // [D][kBc]  keys, transposed
  float* v_s = kT + D * kBc;   // [kBc][D]
  float* pT = v_s + kBc * D;   // [kBc][kBr] probabilities, transposed

  const int tid = threadIdx.x;
  const int rg = tid / 8, kg = tid % 8;  // rows 4rg..4rg+3; keys 4kg..4kg+3; channels 4kg + 32q + e
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kBr;
  const HeadOffsets off = head_offsets(d, blockIdx.y, D);  // q of its head, k and v of its K/V head
  const std::size_t row_w = d.W;
  const float q_scale = d.scale * kLog2e;

  // Q^T: thread takes 8 channels of one row (a 16-byte load); consecutive threads take
  // consecutive rows, so the 8 transposed stores of a warp hit 32 consecutive floats.
  for (int idx = tid; idx < kBr * (D / 8); idx += kThreads) {
    const int r = idx % kBr, c8 = idx / kBr;
    const int t = q0 + r;
    float x[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (t < d.T) load8<E>(x, qkv + off.q + static_cast<std::size_t>(t) * row_w + c8 * 8);
#pragma unroll
    for (int e = 0; e < 8; ++e) qT[(c8 * 8 + e) * kBr + r] = x[e] * q_scale;
  }

  float o[4][D / 8];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int c = 0; c < D / 8; ++c) o[i][c] = 0.0f;
  float m[4], l[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
  }

  const int kv_end = keys_end(d, q0, kBr);
  for (int j0 = 0; j0 < kv_end; j0 += kBc) {
    __syncthreads();  // the previous tile's V and P^T are no longer read (and Q^T is written)
    for (int idx = tid; idx < kBc * (D / 8); idx += kThreads) {
      {  // K^T, transposed like Q^T
        const int r = idx % kBc, c8 = idx / kBc;
        const int u = j0 + r;
        float x[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (u < d.T) load8<E>(x, qkv + off.k + static_cast<std::size_t>(u) * row_w + c8 * 8);
#pragma unroll
        for (int e = 0; e < 8; ++e) kT[(c8 * 8 + e) * kBc + r] = x[e];
      }
      {  // V as is: consecutive threads take consecutive 16-byte chunks of one row
        const int r = idx / (D / 8), c8 = idx % (D / 8);
        const int u = j0 + r;
        float x[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (u < d.T) load8<E>(x, qkv + off.v + static_cast<std::size_t>(u) * row_w + c8 * 8);
        float4* dst = reinterpret_cast<float4*>(v_s + r * D + c8 * 8);
        dst[0] = make_float4(x[0], x[1], x[2], x[3]);
        dst[1] = make_float4(x[4], x[5], x[6], x[7]);
      }
    }
    __syncthreads();

    // 4 x 4 scores (log2 units): one float4 of Q^T and one of K^T per channel.
    float s[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) s[i][j] = 0.0f;
#pragma unroll 8
    for (int c = 0; c < D; ++c) {
      const float4 qv = reinterpret_cast<const float4*>(qT + c * kBr)[rg];
      const float4 kv = reinterpret_cast<const float4*>(kT + c * kBc)[kg];
      const float qa[4] = {qv.x, qv.y, qv.z, qv.w};
      const float ka[4] = {kv.x, kv.y, kv.z, kv.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) s[i][j] = fmaf(qa[i], ka[j], s[i][j]);
    }
    if (tile_needs_mask(d, q0, j0, kBc)) {  // tail or diagonal tile: mask
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int u = j0 + 4 * kg + j, t = q0 + 4 * rg + i;
          if (!key_visible(d, t, u)) s[i][j] = -INFINITY;
        }
    }

    // Online softmax per row, over the 8 lanes of the row group.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float mx = fmaxf(fmaxf(s[i][0], s[i][1]), fmaxf(s[i][2], s[i][3]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
      const auto [m_use, alpha] = online_softmax_step(m[i], mx);
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        s[i][j] = exp2f(s[i][j] - m_use);
        sum += s[i][j];
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      sum += __shfl_xor_sync(0xffffffffu, sum, 4);
      l[i] = l[i] * alpha + sum;
#pragma unroll
      for (int c = 0; c < D / 8; ++c) o[i][c] *= alpha;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j)
      reinterpret_cast<float4*>(pT + (4 * kg + j) * kBr)[rg] = make_float4(s[0][j], s[1][j], s[2][j], s[3][j]);
    __syncthreads();

    // O += P V: per key one float4 of P^T (this thread's 4 rows) and D/32 float4s of V.
#pragma unroll 4
    for (int c = 0; c < kBc; ++c) {
      const float4 pv = reinterpret_cast<const float4*>(pT + c * kBr)[rg];
      const float pa[4] = {pv.x, pv.y, pv.z, pv.w};
#pragma unroll
      for (int q = 0; q < D / 32; ++q) {
        const float4 vv = reinterpret_cast<const float4*>(v_s + c * D + 32 * q)[kg];
        const float va[4] = {vv.x, vv.y, vv.z, vv.w};
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e) o[i][4 * q + e] = fmaf(pa[i], va[e], o[i][4 * q + e]);
      }
    }
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int t = q0 + 4 * rg + i;
    if (t >= d.T) continue;
    const float inv = 1.0f / l[i];
    std::uint16_t* o_row = out + off.o + static_cast<std::size_t>(t) * d.C;
#pragma unroll
    for (int q = 0; q < D / 32; ++q) {
      const std::uint32_t lo = E::store(o[i][4 * q] * inv) | (std::uint32_t{E::store(o[i][4 * q + 1] * inv)} << 16);
      const std::uint32_t hi =
          E::store(o[i][4 * q + 2] * inv) | (std::uint32_t{E::store(o[i][4 * q + 3] * inv)} << 16);
      *reinterpret_cast<uint2*>(o_row + 32 * q + 4 * kg) = make_uint2(lo, hi);
    }
    if (kg == 0) lse[off.row + t] = (m[i] + log2f(l[i])) * kLn2;
  }
}

template <typename E, int D>
void launch(cudaStream_t stream, std::uint16_t* out, float* lse, const std::uint16_t* qkv, const AttentionShape& shape) {
  const Dims d = make_dims(shape);
  const std::size_t smem = smem_bytes<D>();
  allow_shared_memory(forward_kernel<E, D>, smem, "flash v2 forward");
  const dim3 grid(static_cast<unsigned>((shape.T + kBr - 1) / kBr), static_cast<unsigned>(shape.B * shape.H));
  forward_kernel<E, D><<<grid, kThreads, smem, stream>>>(out, lse, qkv, d);
  CUDA_CHECK_LAUNCH("flash_attention v2 forward_kernel");
}

}  // namespace

void forward_v2(cudaStream_t stream, Half16 dtype, std::uint16_t* out, float* lse, const std::uint16_t* qkv,
                const AttentionShape& shape) {
  require_aligned(qkv, 16, "qkv (16-byte vector loads)");
  require_aligned(out, 8, "out");
  if (dtype == Half16::bf16) {
    if (shape.D == 64) launch<Bf16, 64>(stream, out, lse, qkv, shape);
    else launch<Bf16, 128>(stream, out, lse, qkv, shape);
  } else {
    if (shape.D == 64) launch<Fp16, 64>(stream, out, lse, qkv, shape);
    else launch<Fp16, 128>(stream, out, lse, qkv, shape);
  }
}

}  // namespace trainmem::kernels::cuda::flash
