// Flash attention v1: the algorithm of flash_attention.h written as directly as CUDA allows.
//
// Forward: one block of 32 threads per (query tile of 32 rows, b, h); thread i owns query row
// q0 + i from start to end. The block copies its query tile (scaled by 1/sqrt(D), widened to
// fp32) into shared memory once, then walks over the key/value tiles: the 32 threads copy a
// K tile and a V tile (32 rows each, fp32) into shared memory together, and each thread computes
// its row's 32 scores, the online-softmax update of (m, l) and O += P V in fp32 registers.
// Every value of K and V read from global memory is used by all 32 query rows of the block
// (that is the whole point of tiling); everything else is plain scalar fp32 math, one row per
// thread. Nothing of size T x T exists: per row the kernel keeps D + 2 floats.
//
// Backward (two kernels after the rowsum pass of flash_attention.cu, no atomics):
//   dq kernel   one thread per query row, like the forward: rebuilds P and dP tile by tile
//               from lse and accumulates dQ_i = sum_j dS_ij K_j / sqrt(D) in registers;
//   dkdv kernel one thread per KEY row of a K/V head: walks over the query tiles (those at or
//               after the key, when causal) of each query head of its group in turn, and
//               accumulates dV_j += P_ij^T dO_i and dK_j += dS_ij^T Q_i / sqrt(D) in shared
//               memory (its own padded row, so no two threads share a bank).
// Recomputing P twice costs FLOPs, but nothing is added up by two threads at once: the sums over a
// group's query heads (grouped K/V, flash_attention.h) are in head order, deterministic.
//
// Shared-memory rows a thread walks along on its own are padded to D + 1 floats (row r starts
// at bank r mod 32: conflict-free); rows every thread reads at the same index are broadcasts.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/flash_attention_internal.cuh"

namespace trainmem::kernels::cuda::flash {

namespace {

constexpr int kBr = 32;  // query rows per tile = threads per block
constexpr int kBc = 32;  // key rows per tile

template <int D>
constexpr std::size_t forward_smem_bytes() {
  return sizeof(float) * (kBr * (D + 1) + 2 * kBc * D);
}

template <typename E, int D>
__global__ void __launch_bounds__(kBr) forward_kernel(std::uint16_t* __restrict__ out, float* __restrict__ lse,
                                                      const std::uint16_t* __restrict__ qkv, Dims d) {
  extern __shared__ float smem[];
  float* q_s = smem;                   // [kBr][D + 1] queries * scale
  float* k_s = q_s + kBr * (D + 1);    // [kBc][D]
  float* v_s = k_s + kBc * D;          // [kBc][D]
  const int i = threadIdx.x;
  const int q0 = blockIdx.x * kBr;
  const int t = q0 + i;
  const HeadOffsets off = head_offsets(d, blockIdx.y, D);
  const std::size_t row_w = d.W;

  // Query tile, coalesced: consecutive threads read consecutive channels of one row.
  for (int idx = i; idx < kBr * D; idx += kBr) {
    const int r = idx / D, c = idx % D;
    const int tr = q0 + r;
    q_s[r * (D + 1) + c] = tr < d.T ? E::load(qkv[off.q + static_cast<std::size_t>(tr) * row_w + c]) * d.scale : 0.0f;
  }

  float o[D];
#pragma unroll
  for (int k = 0; k < D; ++k) o[k] = 0.0f;
  float m = -INFINITY, l = 0.0f;

  // Causal: key tiles past the last query of this tile are never loaded.
  const int kv_end = keys_end(d, q0, kBr);
  for (int j0 = 0; j0 < kv_end; j0 += kBc) {
    __syncthreads();  // every thread is done with the previous K/V tile (and the Q tile is written)
    for (int idx = i; idx < kBc * D; idx += kBr) {
      const int r = idx / D, c = idx % D;
      const int u = j0 + r;
      const std::size_t at = static_cast<std::size_t>(u) * row_w + c;
      k_s[r * D + c] = u < d.T ? E::load(qkv[off.k + at]) : 0.0f;
      v_s[r * D + c] = u < d.T ? E::load(qkv[off.v + at]) : 0.0f;
    }
    __syncthreads();

    // S_ij for this thread's row: masked keys (past T, or after the query when causal) get -inf.
    float s[kBc];
    float tile_max = -INFINITY;
#pragma unroll
    for (int c = 0; c < kBc; ++c) {
      const int u = j0 + c;
      float acc = -INFINITY;
      if (key_visible(d, t, u)) {
        acc = 0.0f;
#pragma unroll 16
        for (int k = 0; k < D; ++k) acc += q_s[i * (D + 1) + k] * k_s[c * D + k];
      }
      s[c] = acc;
      tile_max = fmaxf(tile_max, acc);
    }
    const float m_new = fmaxf(m, tile_max);
    if (m_new == -INFINITY) continue;  // nothing visible yet (cannot happen: key 0 is in the first tile)
    const float alpha = expf(m - m_new);  // rescales what was summed under the old max (0 at the start)
    l *= alpha;
#pragma unroll
    for (int k = 0; k < D; ++k) o[k] *= alpha;
#pragma unroll
    for (int c = 0; c < kBc; ++c) {
      const float p = expf(s[c] - m_new);  // exp(-inf) = 0 for masked keys
      l += p;
#pragma unroll
      for (int k = 0; k < D; ++k) o[k] += p * v_s[c * D + k];
    }
    m = m_new;
  }

  if (t < d.T) {
    const float inv_l = 1.0f / l;
    std::uint16_t* o_row = out + off.o + static_cast<std::size_t>(t) * d.C;
#pragma unroll
    for (int k = 0; k < D; ++k) o_row[k] = E::store(o[k] * inv_l);
    lse[off.row + t] = m + logf(l);
  }
}

// dQ_i = sum_j dS_ij K_j / sqrt(D), dS_ij = P_ij (dO_i . V_j - Dvec_i), P_ij = exp(S_ij - lse_i).
template <int D>
constexpr std::size_t dq_smem_bytes() {
  return sizeof(float) * (2 * kBr * (D + 1) + 2 * kBc * D);
}

template <typename E, int D>
__global__ void __launch_bounds__(kBr) dq_kernel(std::uint16_t* __restrict__ dqkv, const std::uint16_t* __restrict__ dout,
                                                 const std::uint16_t* __restrict__ qkv, const float* __restrict__ lse,
                                                 const float* __restrict__ Dvec, Dims d) {
  extern __shared__ float smem[];
  float* q_s = smem;                    // [kBr][D + 1] queries * scale
  float* do_s = q_s + kBr * (D + 1);    // [kBr][D + 1]
  float* k_s = do_s + kBr * (D + 1);    // [kBc][D]
  float* v_s = k_s + kBc * D;           // [kBc][D]
  const int i = threadIdx.x;
  const int q0 = blockIdx.x * kBr;
  const int t = q0 + i;
  const HeadOffsets off = head_offsets(d, blockIdx.y, D);
  const std::size_t row_w = d.W;

  for (int idx = i; idx < kBr * D; idx += kBr) {
    const int r = idx / D, c = idx % D;
    const int tr = q0 + r;
    const bool valid = tr < d.T;
    q_s[r * (D + 1) + c] = valid ? E::load(qkv[off.q + static_cast<std::size_t>(tr) * row_w + c]) * d.scale : 0.0f;
    do_s[r * (D + 1) + c] = valid ? E::load(dout[off.o + static_cast<std::size_t>(tr) * d.C + c]) : 0.0f;
  }
  const float lse_t = t < d.T ? lse[off.row + t] : 0.0f;
  const float D_t = t < d.T ? Dvec[off.row + t] : 0.0f;

  float dq[D];
#pragma unroll
  for (int k = 0; k < D; ++k) dq[k] = 0.0f;

  const int kv_end = keys_end(d, q0, kBr);
  for (int j0 = 0; j0 < kv_end; j0 += kBc) {
    __syncthreads();
    for (int idx = i; idx < kBc * D; idx += kBr) {
      const int r = idx / D, c = idx % D;
      const int u = j0 + r;
      const std::size_t at = static_cast<std::size_t>(u) * row_w + c;
      k_s[r * D + c] = u < d.T ? E::load(qkv[off.k + at]) : 0.0f;
      v_s[r * D + c] = u < d.T ? E::load(qkv[off.v + at]) : 0.0f;
    }
    __syncthreads();
    if (t >= d.T) continue;
#pragma unroll 2
    for (int c = 0; c < kBc; ++c) {
      const int u = j0 + c;
      if (!key_visible(d, t, u)) continue;
      float s = 0.0f, dp = 0.0f;
#pragma unroll 16
      for (int k = 0; k < D; ++k) {
        s += q_s[i * (D + 1) + k] * k_s[c * D + k];
        dp += do_s[i * (D + 1) + k] * v_s[c * D + k];
      }
      const float ds = expf(s - lse_t) * (dp - D_t);
#pragma unroll
      for (int k = 0; k < D; ++k) dq[k] += ds * k_s[c * D + k];
    }
  }
  if (t < d.T) {
    std::uint16_t* dq_row = dqkv + off.q + static_cast<std::size_t>(t) * row_w;
#pragma unroll
    for (int k = 0; k < D; ++k) dq_row[k] = E::store(dq[k] * d.scale);
  }
}

// dV_j = sum_i P_ij^T dO_i, dK_j = sum_i dS_ij^T Q_i / sqrt(D), one thread per key row of K/V head
// (b, g) = blockIdx.y, the sums running over the query heads of its group in order.
template <int D>
constexpr std::size_t dkdv_smem_bytes() {
  return sizeof(float) * (4 * kBc * (D + 1) + 2 * kBr * D + 2 * kBr);
}

template <typename E, int D>
__global__ void __launch_bounds__(kBc) dkdv_kernel(std::uint16_t* __restrict__ dqkv,
                                                   const std::uint16_t* __restrict__ dout,
                                                   const std::uint16_t* __restrict__ qkv, const float* __restrict__ lse,
                                                   const float* __restrict__ Dvec, Dims d) {
  extern __shared__ float smem[];
  float* k_s = smem;                    // [kBc][D + 1] this block's keys
  float* v_s = k_s + kBc * (D + 1);     // [kBc][D + 1] this block's values
  float* dk_s = v_s + kBc * (D + 1);    // [kBc][D + 1] accumulators
  float* dv_s = dk_s + kBc * (D + 1);   // [kBc][D + 1]
  float* q_s = dv_s + kBc * (D + 1);    // [kBr][D] queries * scale
  float* do_s = q_s + kBr * D;          // [kBr][D]
  float* lse_s = do_s + kBr * D;        // [kBr]
  float* D_s = lse_s + kBr;             // [kBr]
  const int i = threadIdx.x;
  const int k0 = blockIdx.x * kBc;
  const int u = k0 + i;
  const HeadOffsets kv = head_offsets(d, group_member(d, blockIdx.y, 0), D);  // its k and v
  const std::size_t row_w = d.W;

  for (int idx = i; idx < kBc * D; idx += kBc) {
    const int r = idx / D, c = idx % D;
    const int ur = k0 + r;
    const std::size_t at = static_cast<std::size_t>(ur) * row_w + c;
    k_s[r * (D + 1) + c] = ur < d.T ? E::load(qkv[kv.k + at]) : 0.0f;
    v_s[r * (D + 1) + c] = ur < d.T ? E::load(qkv[kv.v + at]) : 0.0f;
    dk_s[r * (D + 1) + c] = 0.0f;
    dv_s[r * (D + 1) + c] = 0.0f;
  }

  // Causal: query tiles that end before this key tile starts see none of its keys.
  const int q_begin = d.causal ? (k0 / kBr) * kBr : 0;
  for (int member = 0; member < d.group; ++member) {  // the group's query heads, in order
    const HeadOffsets off = head_offsets(d, group_member(d, blockIdx.y, member), D);
    for (int i0 = q_begin; i0 < d.T; i0 += kBr) {
      __syncthreads();
      for (int idx = i; idx < kBr * D; idx += kBc) {
        const int r = idx / D, c = idx % D;
        const int tr = i0 + r;
        const bool valid = tr < d.T;
        q_s[r * D + c] = valid ? E::load(qkv[off.q + static_cast<std::size_t>(tr) * row_w + c]) * d.scale : 0.0f;
        do_s[r * D + c] = valid ? E::load(dout[off.o + static_cast<std::size_t>(tr) * d.C + c]) : 0.0f;
      }
      {
        const int tr = i0 + i;  // kBr == kBc: one statistic per thread
        lse_s[i] = tr < d.T ? lse[off.row + tr] : 0.0f;
        D_s[i] = tr < d.T ? Dvec[off.row + tr] : 0.0f;
      }
      __syncthreads();
      if (u >= d.T) continue;
      for (int r = 0; r < kBr; ++r) {
        const int t = i0 + r;
        if (t >= d.T || (d.causal && u > t)) continue;
        float s = 0.0f, dp = 0.0f;
#pragma unroll 16
        for (int k = 0; k < D; ++k) {
          s += q_s[r * D + k] * k_s[i * (D + 1) + k];
          dp += do_s[r * D + k] * v_s[i * (D + 1) + k];
        }
        const float p = expf(s - lse_s[r]);
        const float ds = p * (dp - D_s[r]);
#pragma unroll 16
        for (int k = 0; k < D; ++k) {
          dv_s[i * (D + 1) + k] += p * do_s[r * D + k];
          dk_s[i * (D + 1) + k] += ds * q_s[r * D + k];  // q_s holds q / sqrt(D)
        }
      }
    }
  }
  if (u < d.T) {
    std::uint16_t* dk_row = dqkv + kv.k + static_cast<std::size_t>(u) * row_w;
    std::uint16_t* dv_row = dqkv + kv.v + static_cast<std::size_t>(u) * row_w;
    for (int k = 0; k < D; ++k) {
      dk_row[k] = E::store(dk_s[i * (D + 1) + k]);
      dv_row[k] = E::store(dv_s[i * (D + 1) + k]);
    }
  }
}

template <typename E, int D>
void forward_launch(cudaStream_t stream, std::uint16_t* out, float* lse, const std::uint16_t* qkv,
                    const AttentionShape& shape) {
  const Dims d = make_dims(shape);
  const std::size_t smem = forward_smem_bytes<D>();
  allow_shared_memory(forward_kernel<E, D>, smem, "flash v1 forward");
  const dim3 grid(static_cast<unsigned>((shape.T + kBr - 1) / kBr), static_cast<unsigned>(shape.B * shape.H));
  forward_kernel<E, D><<<grid, kBr, smem, stream>>>(out, lse, qkv, d);
  CUDA_CHECK_LAUNCH("flash_attention v1 forward_kernel");
}

template <typename E, int D>
void backward_launch(cudaStream_t stream, std::uint16_t* dqkv, const std::uint16_t* dout, const std::uint16_t* qkv,
                     const float* lse, const float* Dvec, const AttentionShape& shape) {
  const Dims d = make_dims(shape);
  const unsigned bh = static_cast<unsigned>(shape.B * shape.H);
  allow_shared_memory(dq_kernel<E, D>, dq_smem_bytes<D>(), "flash v1 dq");
  dq_kernel<E, D><<<dim3(static_cast<unsigned>((shape.T + kBr - 1) / kBr), bh), kBr, dq_smem_bytes<D>(), stream>>>(
      dqkv, dout, qkv, lse, Dvec, d);
  CUDA_CHECK_LAUNCH("flash_attention v1 dq_kernel");
  allow_shared_memory(dkdv_kernel<E, D>, dkdv_smem_bytes<D>(), "flash v1 dkdv");
  const unsigned bg = static_cast<unsigned>(shape.B * shape.kv_heads());  // one block row per K/V head
  dkdv_kernel<E, D><<<dim3(static_cast<unsigned>((shape.T + kBc - 1) / kBc), bg), kBc, dkdv_smem_bytes<D>(),
                      stream>>>(dqkv, dout, qkv, lse, Dvec, d);
  CUDA_CHECK_LAUNCH("flash_attention v1 dkdv_kernel");
}

template <typename E>
void forward_dispatch_d(cudaStream_t stream, std::uint16_t* out, float* lse, const std::uint16_t* qkv,
                        const AttentionShape& shape) {
  if (shape.D == 64) forward_launch<E, 64>(stream, out, lse, qkv, shape);
  else forward_launch<E, 128>(stream, out, lse, qkv, shape);
}

template <typename E>
void backward_dispatch_d(cudaStream_t stream, std::uint16_t* dqkv, const std::uint16_t* dout, const std::uint16_t* qkv,
                         const float* lse, const float* Dvec, const AttentionShape& shape) {
  if (shape.D == 64) backward_launch<E, 64>(stream, dqkv, dout, qkv, lse, Dvec, shape);
  else backward_launch<E, 128>(stream, dqkv, dout, qkv, lse, Dvec, shape);
}

}  // namespace

void forward_v1(cudaStream_t stream, Half16 dtype, std::uint16_t* out, float* lse, const std::uint16_t* qkv,
                const AttentionShape& shape) {
  if (dtype == Half16::bf16) forward_dispatch_d<Bf16>(stream, out, lse, qkv, shape);
  else forward_dispatch_d<Fp16>(stream, out, lse, qkv, shape);
}

void backward_v1(cudaStream_t stream, Half16 dtype, std::uint16_t* dqkv, const std::uint16_t* dout,
                 const std::uint16_t* qkv, const std::uint16_t* out, const float* lse, void* workspace,
                 const AttentionShape& shape) {
  float* Dvec = static_cast<float*>(workspace);
  launch_rowsum_dout_out(stream, dtype, Dvec, dout, out, shape);
  if (dtype == Half16::bf16) backward_dispatch_d<Bf16>(stream, dqkv, dout, qkv, lse, Dvec, shape);
  else backward_dispatch_d<Fp16>(stream, dqkv, dout, qkv, lse, Dvec, shape);
}

}  // namespace trainmem::kernels::cuda::flash
