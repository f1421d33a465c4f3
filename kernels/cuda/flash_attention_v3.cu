// Flash attention v3: tensor cores and asynchronous copies (sm_80+), FlashAttention-2's scheme.
//
// What it adds over v2, and why it is faster:
//   - The two products per tile, S = Q K^T and O += P V, run on the tensor cores with
//     mma.sync.m16n8k16 (16-bit inputs, fp32 accumulators): 16x8x16 multiply-adds per warp
//     instruction, an order of magnitude more math per cycle than the fp32 FMAs of v1/v2. The
//     inputs stay in their 16-bit format from global memory to the tensor core (no fp32 copies in
//     shared memory: half the shared memory and half the shared-memory traffic of v2).
//   - Fragments come out of shared memory with ldmatrix (one instruction: four 8x8 matrices
//     spread over the warp exactly as mma wants them; the .trans form serves V, which is used
//     as the transposed operand). Rows are padded by 8 elements (16 bytes), so the 8 row
//     addresses of one 8x8 matrix fall on 8 different groups of 4 banks: no bank conflicts.
//   - K/V tiles are copied global -> shared with cp.async into a double buffer: while the warps
//     multiply tile j, tile j+1 is already on its way (no registers, no stall on the load).
//     Rows past T are zero-filled by the copy itself (src-size 0), so the tail tile needs no
//     special code besides the -inf mask of its scores.
//   - Each warp owns 16 query rows: the row max and row sum need only 2 shuffles inside each
//     quad of lanes, the row sum is reduced across the quad once at the end (FlashAttention-2),
//     and P goes from the S accumulators straight into the A operand of the P V product in
//     registers (the accumulator layout of two 16x8 tiles is the A layout of one 16x16 tile).
//   - Causal: key tiles past the query tile are never loaded, and the blocks with the most key
//     tiles (the last query tiles) are launched first, so the short ones fill the tail.
//
// Backward (its own, also on tensor cores): one block per 64 keys (16 per warp) of a K/V head,
// walking over the query tiles of 32 rows (double-buffered with cp.async) of each query head of
// its group in turn (grouped K/V, flash_attention.h: one walk of group * tiles steps, so the
// prefetch runs on across the heads); per tile each warp computes
//   S^T = K Q^T,  P^T = exp(S^T - lse),  dV += P^T dO,  dP^T = V dO^T,  dS^T = P^T (dP^T - Dvec),
//   dK += dS^T Q
// with mma.sync, keeping dK and dV in registers for the whole walk (so they are summed over the
// group's query heads in head order, deterministically, and need no workspace). dQ needs a sum
// over all key blocks: the block writes dS to shared memory, computes its 32 x D share of dS K
// with mma, and adds it into an fp32 accumulator in the workspace with atomicAdd; a last pass
// scales it by 1/sqrt(D) and rounds it into dqkv. The workspace holds Dvec = rowsum(dO * O) and
// that accumulator.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/flash_attention_internal.cuh"

namespace trainmem::kernels::cuda::flash {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kPad = 8;  // elements of padding per shared-memory row (16 bytes)
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Copies rows [row0, row0 + Rows) of one head's q, k, v or dO (row r at src + r*row_stride,
// D contiguous 16-bit values) into shared memory dst[Rows][D + kPad] with cp.async. Rows at or
// past T are zero-filled (the source address is then row 0, which is valid, and not read).
template <int Rows, int D>
__device__ __forceinline__ void load_tile_async(std::uint16_t* dst, const std::uint16_t* src, std::size_t row_stride,
                                                int row0, int T) {
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  for (int idx = threadIdx.x; idx < Rows * kChunks; idx += kThreads) {
    const int r = idx / kChunks, c = idx % kChunks;
    const int row = row0 + r;
    const bool valid = row < T;
    const std::uint16_t* from = src + (valid ? static_cast<std::size_t>(row) * row_stride : 0) + c * 8;
    cp_async_16(dst + r * (D + kPad) + c * 8, from, valid);
  }
}

// ============================================================================ forward
constexpr int kFwdBr = 64;  // query rows per block (16 per warp)
constexpr int kFwdBc = 64;  // key rows per tile

template <int D>
constexpr std::size_t forward_smem_bytes() {
  return sizeof(std::uint16_t) * (kFwdBr + 4 * kFwdBc) * (D + kPad);  // Q, K[2], V[2]
}

template <typename E, int D>
__global__ void __launch_bounds__(kThreads) forward_kernel(std::uint16_t* __restrict__ out, float* __restrict__ lse,
                                                           const std::uint16_t* __restrict__ qkv, Dims d) {
  constexpr int S = D + kPad;  // shared row stride (elements)
  extern __shared__ __align__(16) unsigned char smem_raw[];
  std::uint16_t* q_s = reinterpret_cast<std::uint16_t*>(smem_raw);  // [kFwdBr][S]
  std::uint16_t* k_s = q_s + kFwdBr * S;                             // [2][kFwdBc][S]
  std::uint16_t* v_s = k_s + 2 * kFwdBc * S;                         // [2][kFwdBc][S]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, cq = lane % 4;  // accumulator row within 8, column pair
  const int q_tile = gridDim.x - 1 - blockIdx.x;  // longest (causal) first
  const int q0 = q_tile * kFwdBr;
  const HeadOffsets off = head_offsets(d, blockIdx.y, D);  // q of its head, k and v of its K/V head
  const std::size_t row_w = d.W;
  const std::uint16_t* q_head = qkv + off.q;
  const std::uint16_t* k_head = qkv + off.k;
  const std::uint16_t* v_head = qkv + off.v;

  const int kv_end = keys_end(d, q0, kFwdBr);
  const int n_tiles = (kv_end + kFwdBc - 1) / kFwdBc;

  load_tile_async<kFwdBr, D>(q_s, q_head, row_w, q0, d.T);
  load_tile_async<kFwdBc, D>(k_s, k_head, row_w, 0, d.T);
  load_tile_async<kFwdBc, D>(v_s, v_head, row_w, 0, d.T);
  cp_async_commit();

  std::uint32_t qf[D / 16][4];  // this warp's 16 query rows as A fragments, one per 16 channels
  float o[D / 8][4];            // O accumulators: 16 rows x D
#pragma unroll
  for (int n = 0; n < D / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[n][e] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY};  // running max (log2 units) of rows g and g + 8
  float l[2] = {0.0f, 0.0f};            // this lane's part of the running sums
  const float scale_log2 = d.scale * kLog2e;  // exp(x * scale) = exp2(x * scale * log2 e)
  const int row_lo = q0 + warp * 16 + g;      // the two query rows of this lane
  const int rows[2] = {row_lo, row_lo + 8};

  for (int j = 0; j < n_tiles; ++j) {
    const int buf = j & 1;
    if (j + 1 < n_tiles) {  // prefetch tile j+1 into the other buffer, then wait for tile j only
      load_tile_async<kFwdBc, D>(k_s + (buf ^ 1) * kFwdBc * S, k_head, row_w, (j + 1) * kFwdBc, d.T);
      load_tile_async<kFwdBc, D>(v_s + (buf ^ 1) * kFwdBc * S, v_head, row_w, (j + 1) * kFwdBc, d.T);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (j == 0) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        ldmatrix_x4(qf[kk], q_s + (warp * 16 + lane % 16) * S + kk * 16 + (lane / 16) * 8);
    }
    const std::uint16_t* kt = k_s + buf * kFwdBc * S;
    const std::uint16_t* vt = v_s + buf * kFwdBc * S;

    // S = Q K^T: 16 rows x 64 keys per warp, 8 accumulator tiles of 16x8.
    float s[kFwdBc / 8][4];
#pragma unroll
    for (int n = 0; n < kFwdBc / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
      for (int nn = 0; nn < kFwdBc / 16; ++nn) {
        std::uint32_t b[4];  // keys nn*16 .. +15, channels kk*16 .. +15
        ldmatrix_x4(b, kt + (nn * 16 + lane % 8 + (lane / 16) * 8) * S + kk * 16 + ((lane / 8) % 2) * 8);
        mma_16816<E>(s[2 * nn], qf[kk], b[0], b[1]);
        mma_16816<E>(s[2 * nn + 1], qf[kk], b[2], b[3]);
      }
    }

    // Mask: keys past T, and keys after the query when causal (only the last tile and the
    // diagonal tile can have any).
    const int key0 = j * kFwdBc;
    if (tile_needs_mask(d, q0, key0, kFwdBc)) {
#pragma unroll
      for (int n = 0; n < kFwdBc / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key0 + n * 8 + 2 * cq + (e & 1);
          if (!key_visible(d, rows[e / 2], key)) s[n][e] = -INFINITY;
        }
    }

    // Online softmax, rows g (e = 0, 1) and g + 8 (e = 2, 3); a row lives in the 4 lanes of a quad.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = m[h];
#pragma unroll
      for (int n = 0; n < kFwdBc / 8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * h], s[n][2 * h + 1]) * scale_log2);
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const auto [m_use, alpha] = online_softmax_step(m[h], mx);
      l[h] *= alpha;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        o[n][2 * h] *= alpha;
        o[n][2 * h + 1] *= alpha;
      }
#pragma unroll
      for (int n = 0; n < kFwdBc / 8; ++n)
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e) {
          const float p = exp2f(fmaf(s[n][e], scale_log2, -m_use));  // exp2(-inf) = 0 where masked
          s[n][e] = p;
          l[h] += p;
        }
    }

    // O += P V: P (16 x 64) as four A fragments of 16 keys, V^T fragments by ldmatrix.trans.
#pragma unroll
    for (int kk = 0; kk < kFwdBc / 16; ++kk) {
      const std::uint32_t a[4] = {E::pack(s[2 * kk][0], s[2 * kk][1]), E::pack(s[2 * kk][2], s[2 * kk][3]),
                                  E::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                  E::pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dn = 0; dn < D / 16; ++dn) {
        std::uint32_t b[4];  // keys kk*16 .. +15, channels dn*16 .. +15
        ldmatrix_x4_trans(b, vt + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * S + dn * 16 + (lane / 16) * 8);
        mma_16816<E>(o[2 * dn], a, b[0], b[1]);
        mma_16816<E>(o[2 * dn + 1], a, b[2], b[3]);
      }
    }
    __syncthreads();  // everyone is done with buffer `buf` before it is refilled
  }

  // out = O / l, lse = (m + log2 l) ln 2 (m is in log2 units).
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = l[h];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int t = rows[h];
    if (t >= d.T) continue;
    const float inv = 1.0f / sum;
    std::uint16_t* o_row = out + off.o + static_cast<std::size_t>(t) * d.C;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      const std::uint32_t v = E::pack(o[n][2 * h] * inv, o[n][2 * h + 1] * inv);
      *reinterpret_cast<std::uint32_t*>(o_row + n * 8 + 2 * cq) = v;
    }
    if (cq == 0) lse[off.row + t] = (m[h] + log2f(sum)) * kLn2;
  }
}

// ============================================================================ backward
constexpr int kBwdBc = 64;  // keys per block (16 per warp)
constexpr int kBwdBr = 32;  // query rows per tile of the walk
constexpr int kDsStride = kBwdBr + kPad;

template <int D>
constexpr std::size_t backward_smem_bytes() {
  return sizeof(std::uint16_t) * (2 * kBwdBc * (D + kPad)      // K, V
                                  + 4 * kBwdBr * (D + kPad)    // Q[2], dO[2]
                                  + kBwdBc * kDsStride)        // dS^T
         + sizeof(float) * 4 * kBwdBr;                         // lse[2], Dvec[2]
}

// Packs two 16x8 accumulator tiles (columns 0-7 and 8-15 of a 16x16 block) as one A fragment.
template <typename E>
__device__ __forceinline__ void acc_to_a(std::uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = E::pack(lo[0], lo[1]);
  a[1] = E::pack(lo[2], lo[3]);
  a[2] = E::pack(hi[0], hi[1]);
  a[3] = E::pack(hi[2], hi[3]);
}

template <typename E, int D>
__global__ void __launch_bounds__(kThreads) backward_kernel(std::uint16_t* __restrict__ dqkv, float* __restrict__ dq_acc,
                                                            const std::uint16_t* __restrict__ dout,
                                                            const std::uint16_t* __restrict__ qkv,
                                                            const float* __restrict__ lse,
                                                            const float* __restrict__ Dvec, Dims d) {
  constexpr int S = D + kPad;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  std::uint16_t* k_s = reinterpret_cast<std::uint16_t*>(smem_raw);  // [kBwdBc][S]
  std::uint16_t* v_s = k_s + kBwdBc * S;                              // [kBwdBc][S]
  std::uint16_t* q_s = v_s + kBwdBc * S;                              // [2][kBwdBr][S]
  std::uint16_t* do_s = q_s + 2 * kBwdBr * S;                         // [2][kBwdBr][S]
  std::uint16_t* ds_s = do_s + 2 * kBwdBr * S;                        // [kBwdBc][kDsStride]: dS^T
  float* lse_s = reinterpret_cast<float*>(ds_s + kBwdBc * kDsStride);  // [2][kBwdBr], times log2 e
  float* dvec_s = lse_s + 2 * kBwdBr;                                  // [2][kBwdBr]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, cq = lane % 4;
  const int k_tile = blockIdx.x;  // causal: the first keys see the most queries, and start first
  const int k0 = k_tile * kBwdBc;
  const int kw = warp * 16;  // this warp's keys within the block
  // blockIdx.y = b*Hkv + (K/V head): the K/V head whose k and v this block reads (and whose dk, dv
  // it writes), and the query heads member = 0 .. group-1 of its group (not g: the lane's row).
  const HeadOffsets kv = head_offsets(d, group_member(d, blockIdx.y, 0), D);
  const std::size_t row_w = d.W;
  const float scale_log2 = d.scale * kLog2e;

  const int q_begin = d.causal ? k0 : 0;  // earlier queries see none of these keys
  const int n_tiles = (d.T - q_begin + kBwdBr - 1) / kBwdBr;  // query tiles per query head
  const int n_steps = d.group * n_tiles;  // step = member * n_tiles + tile
  // The query head of a step (its q, dout, lse, Dvec offsets) and the first row of its tile.
  auto step_head = [&](int step) { return head_offsets(d, group_member(d, blockIdx.y, step / n_tiles), D); };
  auto step_row0 = [&](int step) { return q_begin + (step % n_tiles) * kBwdBr; };

  // Statistics of the query tile of `step` into buffer `buf`: lse * log2 e (+inf past T: P = 0
  // there), Dvec.
  auto load_stats = [&](int step, int buf) {
    if (threadIdx.x < kBwdBr) {
      const std::size_t row = step_head(step).row;
      const int t = step_row0(step) + threadIdx.x;
      lse_s[buf * kBwdBr + threadIdx.x] = t < d.T ? lse[row + t] * kLog2e : INFINITY;
      dvec_s[buf * kBwdBr + threadIdx.x] = t < d.T ? Dvec[row + t] : 0.0f;
    }
  };
  // The query tile of `step` (q and dO) into buffer `buf`, asynchronously.
  auto load_query_tile = [&](int step, int buf) {
    const HeadOffsets h = step_head(step);
    load_tile_async<kBwdBr, D>(q_s + buf * kBwdBr * S, qkv + h.q, row_w, step_row0(step), d.T);
    load_tile_async<kBwdBr, D>(do_s + buf * kBwdBr * S, dout + h.o, d.C, step_row0(step), d.T);
  };

  load_tile_async<kBwdBc, D>(k_s, qkv + kv.k, row_w, k0, d.T);
  load_tile_async<kBwdBc, D>(v_s, qkv + kv.v, row_w, k0, d.T);
  if (n_steps > 0) {
    load_query_tile(0, 0);
    load_stats(0, 0);
  }
  cp_async_commit();

  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0.0f;
  const int keys[2] = {k0 + kw + g, k0 + kw + g + 8};  // the two key rows of this lane

  for (int step = 0; step < n_steps; ++step) {
    const int buf = step & 1;
    const int i0 = step_row0(step);
    const std::size_t row = step_head(step).row;  // this query head's rows of lse, Dvec and dq_acc
    if (step + 1 < n_steps) {  // prefetch the next step's tile (the next head's first, at a head's end)
      load_query_tile(step + 1, buf ^ 1);
      cp_async_commit();
      load_stats(step + 1, buf ^ 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const std::uint16_t* qt = q_s + buf * kBwdBr * S;
    const std::uint16_t* dot = do_s + buf * kBwdBr * S;
    const float* lse_t = lse_s + buf * kBwdBr;
    const float* dvec_t = dvec_s + buf * kBwdBr;

    // S^T = K Q^T and dP^T = V dO^T: this warp's 16 keys x 32 queries each.
    float p[kBwdBr / 8][4], ds[kBwdBr / 8][4];
#pragma unroll
    for (int n = 0; n < kBwdBr / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) p[n][e] = ds[n][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      std::uint32_t ka[4], va[4];
      ldmatrix_x4(ka, k_s + (kw + lane % 16) * S + kk * 16 + (lane / 16) * 8);
      ldmatrix_x4(va, v_s + (kw + lane % 16) * S + kk * 16 + (lane / 16) * 8);
#pragma unroll
      for (int nn = 0; nn < kBwdBr / 16; ++nn) {
        std::uint32_t b[4];  // queries nn*16 .. +15, channels kk*16 .. +15
        ldmatrix_x4(b, qt + (nn * 16 + lane % 8 + (lane / 16) * 8) * S + kk * 16 + ((lane / 8) % 2) * 8);
        mma_16816<E>(p[2 * nn], ka, b[0], b[1]);
        mma_16816<E>(p[2 * nn + 1], ka, b[2], b[3]);
        ldmatrix_x4(b, dot + (nn * 16 + lane % 8 + (lane / 16) * 8) * S + kk * 16 + ((lane / 8) % 2) * 8);
        mma_16816<E>(ds[2 * nn], va, b[0], b[1]);
        mma_16816<E>(ds[2 * nn + 1], va, b[2], b[3]);
      }
    }

    // P^T = exp2(S^T * scale * log2 e - lse * log2 e); masked: keys past T, keys after the
    // query (causal). Queries past T have lse = +inf, so P = 0 there without a test.
    // dS^T = P^T (dP^T - Dvec).
    const bool masked_tile = tile_needs_mask(d, i0, k0, kBwdBc);
#pragma unroll
    for (int n = 0; n < kBwdBr / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int ql = n * 8 + 2 * cq + (e & 1);  // query within the tile
        float pv = exp2f(fmaf(p[n][e], scale_log2, -lse_t[ql]));
        if (masked_tile) {
          const int key = keys[e / 2];
          if (!key_visible(d, i0 + ql, key)) pv = 0.0f;
        }
        p[n][e] = pv;
        ds[n][e] = pv * (ds[n][e] - dvec_t[ql]);
      }

    // dV += P^T dO and dK += dS^T Q (scaled at the end): A from the accumulators, B by .trans.
#pragma unroll
    for (int kk = 0; kk < kBwdBr / 16; ++kk) {
      std::uint32_t pa[4], dsa[4];
      acc_to_a<E>(pa, p[2 * kk], p[2 * kk + 1]);
      acc_to_a<E>(dsa, ds[2 * kk], ds[2 * kk + 1]);
#pragma unroll
      for (int dn = 0; dn < D / 16; ++dn) {
        std::uint32_t b[4];  // queries kk*16 .. +15, channels dn*16 .. +15
        ldmatrix_x4_trans(b, dot + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * S + dn * 16 + (lane / 16) * 8);
        mma_16816<E>(dv[2 * dn], pa, b[0], b[1]);
        mma_16816<E>(dv[2 * dn + 1], pa, b[2], b[3]);
        ldmatrix_x4_trans(b, qt + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * S + dn * 16 + (lane / 16) * 8);
        mma_16816<E>(dk[2 * dn], dsa, b[0], b[1]);
        mma_16816<E>(dk[2 * dn + 1], dsa, b[2], b[3]);
      }
    }

    // dS^T to shared memory (16-bit, as the tensor cores take it), for dQ = dS K.
#pragma unroll
    for (int n = 0; n < kBwdBr / 8; ++n)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        *reinterpret_cast<std::uint32_t*>(ds_s + (kw + g + 8 * h) * kDsStride + n * 8 + 2 * cq) =
            E::pack(ds[n][2 * h], ds[n][2 * h + 1]);
    __syncthreads();

    // dQ (32 queries x D) += dS (32 x 64 keys) K (64 x D): warp w takes queries (w % 2)*16 .. +15
    // and channels (w / 2)*D/2 .. +D/2; A = dS from dS^T by ldmatrix.trans, B = K by .trans.
    {
      const int mq = (warp % 2) * 16;
      const int d0 = (warp / 2) * (D / 2);
      float acc[D / 16][4];
#pragma unroll
      for (int n = 0; n < D / 16; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[n][e] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < kBwdBc / 16; ++kk) {
        std::uint32_t a[4];  // queries mq .. +15, keys kk*16 .. +15
        ldmatrix_x4_trans(a, ds_s + (kk * 16 + lane % 8 + (lane / 16) * 8) * kDsStride + mq + ((lane / 8) % 2) * 8);
#pragma unroll
        for (int dn = 0; dn < D / 32; ++dn) {
          std::uint32_t b[4];  // keys kk*16 .. +15, channels d0 + dn*16 .. +15
          ldmatrix_x4_trans(b, k_s + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * S + d0 + dn * 16 + (lane / 16) * 8);
          mma_16816<E>(acc[2 * dn], a, b[0], b[1]);
          mma_16816<E>(acc[2 * dn + 1], a, b[2], b[3]);
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int t = i0 + mq + g + 8 * h;
        if (t >= d.T) continue;
        float* dq_row = dq_acc + (row + static_cast<std::size_t>(t)) * D + d0;
#pragma unroll
        for (int n = 0; n < D / 16; ++n) {
          atomicAdd(dq_row + n * 8 + 2 * cq, acc[n][2 * h]);
          atomicAdd(dq_row + n * 8 + 2 * cq + 1, acc[n][2 * h + 1]);
        }
      }
    }
    __syncthreads();  // buffers `buf` and dS^T are free again
  }

  // dK = scale * dS^T Q, dV = P^T dO for this warp's 16 keys, summed over the group (rows past T
  // are not written).
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int u = keys[h];
    if (u >= d.T) continue;
    std::uint16_t* dk_row = dqkv + kv.k + static_cast<std::size_t>(u) * row_w;
    std::uint16_t* dv_row = dqkv + kv.v + static_cast<std::size_t>(u) * row_w;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<std::uint32_t*>(dk_row + n * 8 + 2 * cq) =
          E::pack(dk[n][2 * h] * d.scale, dk[n][2 * h + 1] * d.scale);
      *reinterpret_cast<std::uint32_t*>(dv_row + n * 8 + 2 * cq) = E::pack(dv[n][2 * h], dv[n][2 * h + 1]);
    }
  }
}

// dq (16-bit, in dqkv) = scale * dq_acc, dq_acc laid out [B*H][T][D].
template <typename E, int D>
__global__ void dq_convert_kernel(std::uint16_t* __restrict__ dqkv, const float* __restrict__ dq_acc, Dims d,
                                  std::size_t n) {
  for (std::size_t i = detail::global_thread_index(); i < n; i += detail::grid_stride()) {
    const std::size_t k = i % D, row = i / D;  // row = bh*T + t
    const std::size_t T = static_cast<std::size_t>(d.T);
    const std::size_t t = row % T, bh = row / T;
    const std::size_t b = bh / static_cast<std::size_t>(d.H), h = bh % static_cast<std::size_t>(d.H);
    dqkv[(b * T + t) * d.W + h * D + k] = E::store(dq_acc[i] * d.scale);
  }
}

template <typename E, int D>
void forward_launch(cudaStream_t stream, std::uint16_t* out, float* lse, const std::uint16_t* qkv,
                    const AttentionShape& shape) {
  const Dims d = make_dims(shape);
  const std::size_t smem = forward_smem_bytes<D>();
  allow_shared_memory(forward_kernel<E, D>, smem, "flash v3 forward");
  const dim3 grid(static_cast<unsigned>((shape.T + kFwdBr - 1) / kFwdBr), static_cast<unsigned>(shape.B * shape.H));
  forward_kernel<E, D><<<grid, kThreads, smem, stream>>>(out, lse, qkv, d);
  CUDA_CHECK_LAUNCH("flash_attention v3 forward_kernel");
}

template <typename E, int D>
void backward_launch(cudaStream_t stream, std::uint16_t* dqkv, float* dq_acc, const std::uint16_t* dout,
                     const std::uint16_t* qkv, const float* lse, const float* Dvec, const AttentionShape& shape) {
  const Dims d = make_dims(shape);
  const std::size_t n = shape.B * shape.H * shape.T * shape.D;
  CUDA_CHECK(cudaMemsetAsync(dq_acc, 0, n * sizeof(float), stream));
  const std::size_t smem = backward_smem_bytes<D>();
  allow_shared_memory(backward_kernel<E, D>, smem, "flash v3 backward");
  // One block row per K/V head (b, g): its dk, dv are summed over the group inside the block.
  const dim3 grid(static_cast<unsigned>((shape.T + kBwdBc - 1) / kBwdBc),
                  static_cast<unsigned>(shape.B * shape.kv_heads()));
  backward_kernel<E, D><<<grid, kThreads, smem, stream>>>(dqkv, dq_acc, dout, qkv, lse, Dvec, d);
  CUDA_CHECK_LAUNCH("flash_attention v3 backward_kernel");
  dq_convert_kernel<E, D><<<detail::grid_for(n, 256), 256, 0, stream>>>(dqkv, dq_acc, d, n);
  CUDA_CHECK_LAUNCH("flash_attention v3 dq_convert_kernel");
}

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

}  // namespace

void forward_v3(cudaStream_t stream, Half16 dtype, std::uint16_t* out, float* lse, const std::uint16_t* qkv,
                const AttentionShape& shape) {
  require_aligned(qkv, 16, "qkv (cp.async copies 16 bytes)");
  require_aligned(out, 4, "out");
  if (dtype == Half16::bf16) {
    if (shape.D == 64) forward_launch<Bf16, 64>(stream, out, lse, qkv, shape);
    else forward_launch<Bf16, 128>(stream, out, lse, qkv, shape);
  } else {
    if (shape.D == 64) forward_launch<Fp16, 64>(stream, out, lse, qkv, shape);
    else forward_launch<Fp16, 128>(stream, out, lse, qkv, shape);
  }
}

// Workspace: Dvec [B*H*T] fp32, then (256-byte aligned) the dQ accumulator [B*H*T*D] fp32.
void backward_v3(cudaStream_t stream, Half16 dtype, std::uint16_t* dqkv, const std::uint16_t* dout,
                 const std::uint16_t* qkv, const std::uint16_t* out, const float* lse, void* workspace,
                 const AttentionShape& shape) {
  require_aligned(qkv, 16, "qkv (cp.async copies 16 bytes)");
  require_aligned(dout, 16, "dout (cp.async copies 16 bytes)");
  require_aligned(dqkv, 4, "dqkv");
  require_aligned(workspace, 16, "workspace");
  float* Dvec = static_cast<float*>(workspace);
  float* dq_acc = reinterpret_cast<float*>(static_cast<unsigned char*>(workspace) +
                                           round_up(shape.B * shape.H * shape.T * sizeof(float), 256));
  launch_rowsum_dout_out(stream, dtype, Dvec, dout, out, shape);
  if (dtype == Half16::bf16) {
    if (shape.D == 64) backward_launch<Bf16, 64>(stream, dqkv, dq_acc, dout, qkv, lse, Dvec, shape);
    else backward_launch<Bf16, 128>(stream, dqkv, dq_acc, dout, qkv, lse, Dvec, shape);
  } else {
    if (shape.D == 64) backward_launch<Fp16, 64>(stream, dqkv, dq_acc, dout, qkv, lse, Dvec, shape);
    else backward_launch<Fp16, 128>(stream, dqkv, dq_acc, dout, qkv, lse, Dvec, shape);
  }
}

}  // namespace trainmem::kernels::cuda::flash
