// CUDA: the mixture-of-experts kernels (formulas in kernels/moe.h; the CPU reference is
// kernels/cpu/moe.cpp). Each kernel is a template over the element type D (float, __nv_bfloat16,
// __half; dtype.cuh): loads widen to float, the math is float, each output is rounded once. The
// router's probabilities, the weights and their gradients are float; indices int32.
//
// Thread mappings, and the order of every sum (fixed, no atomics: the same bits on every run):
//   router forward, backward   one warp per token row; lanes stride over the E experts. The max,
//                              the softmax's sum and the backward's sum_i p_i dp_i are warp
//                              reductions (a butterfly: each lane first sums its own experts in
//                              order, then the lanes in xor pairs, offsets 16, 8, ..., 1). Top-k:
//                              k rounds of a warp argmax over the experts ranked after the
//                              previous pick (ranks as on the CPU: larger probability first, then
//                              the lower index, NaN last), so CPU and GPU pick the same experts
//                              whenever their probabilities order the same. S = sum_j p_j and
//                              sum_i dw_i w_i are taken in j order, as on the CPU.
//   expert prob sums           one block (256 threads) per expert: thread t adds rows t, t + 256,
//                              ... in order, in double; then the block's butterfly reduction in
//                              double (kernels/cuda/device_utils.cuh, block_reduce); rounded once.
//   plan                       one block per expert, twice: (1) counts its assignments; (2) offset
//                              = sum of the counts of the lower experts, then walks the N*k
//                              assignments in order, 256 at a time, and numbers its own with a
//                              block prefix sum (warp ballots; the warps' totals in warp order).
//                              Integers only: exactly the CPU's result.
//   dispatch, its backward,    one thread per element (grid-stride, 64-bit indices); the backward
//   combine                    and the combine sum j in order in one thread.
//   combine backward           one warp per (token, choice) and one per token's shared row: the
//                              dot product over C (lanes stride c, then a butterfly) is complete
//                              before the warp writes the row's gradient, and no other warp
//                              touches that row: in place (dexpert_out == expert_out, dshared ==
//                              shared_out) is safe.
//   shared gate forward        one warp per token (lanes stride c, then a butterfly).
//   shared gate backward       dweight: a block of 32 columns x 8 row lanes; row lane y adds rows
//                              y, y + 8, ... in order, then row lane 0 adds the 8 lanes' sums in
//                              order y = 0..7, then the old value, and rounds once. dx: one thread
//                              per element (a fused multiply-add where the compiler makes one).
// The compiler may fuse a multiply and an add (one rounding fewer): the results differ from the
// CPU's by rounding only (bounds: kernels/tests/test_moe_cuda.cu).
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/dtype.cuh"
#include "kernels/moe.h"

namespace trainmem::kernels::cuda {

namespace {

// (Names start with Moe: a unity build may put this file beside the others.)
constexpr unsigned kMoeBlock = 256;                                     // threads of every kernel
constexpr unsigned kMoeWarpsPerBlock = kMoeBlock / detail::kWarpSize;  // warp-per-row kernels: 8 rows a block
constexpr unsigned kMoeColTile = 32;                                    // shared gate dweight: columns a block
constexpr unsigned kMoeRowLanes = kMoeBlock / kMoeColTile;              // and its row lanes (8)
constexpr unsigned kMoeFullMask = 0xffffffffu;

// The warp-per-row kernels: this lane, the first row of this warp and the step between its rows.
__device__ __forceinline__ unsigned moe_lane() { return threadIdx.x % detail::kWarpSize; }
__device__ __forceinline__ std::size_t moe_first_warp_row() {
  return static_cast<std::size_t>(blockIdx.x) * kMoeWarpsPerBlock + threadIdx.x / detail::kWarpSize;
}
__device__ __forceinline__ std::size_t moe_warp_row_step() {
  return static_cast<std::size_t>(gridDim.x) * kMoeWarpsPerBlock;
}

// The CPU's order of experts (cpu/moe.cpp): key = p, or -1 for NaN; a before b if its key is
// larger, or equal with the lower index.
__device__ __forceinline__ float moe_rank_key(float p) { return p == p ? p : -1.0f; }
__device__ __forceinline__ bool moe_ranks_before(float key_a, int a, float key_b, int b) {
  return key_a > key_b || (key_a == key_b && a < b);
}

// sigma(g) and 1 - sigma(g) from e = exp(-|g|) (never overflows; expf underflows to 0 gracefully):
//   r = 1 / (1 + e),   g >= 0:  s = r,  1 - s = e r;     g < 0:  s = e r,  1 - s = r
__device__ __forceinline__ void moe_sigmoid(float g, float& s, float& one_minus_s) {
  const float e = expf(-fabsf(g));
  const float r = 1.0f / (1.0f + e);
  s = g >= 0.0f ? r : e * r;
  one_minus_s = g >= 0.0f ? e * r : r;
}

// ---------------------------------------------------------------------------------------- router

// Row r (one warp):  p_e = exp(x_e - m) / sum_i exp(x_i - m);  the top-k of p;  weights.
template <typename D>
__global__ void moe_router_forward_kernel(float* probs, std::int32_t* experts, float* weights, const D* logits,
                                          std::size_t N, std::size_t E, std::size_t k, bool renormalize) {
  const unsigned lane = moe_lane();
  for (std::size_t r = moe_first_warp_row(); r < N; r += moe_warp_row_step()) {
    const D* x = logits + r * E;
    float m = -INFINITY;
    for (std::size_t e = lane; e < E; e += detail::kWarpSize) m = fmaxf(m, detail::to_float(x[e]));
    m = detail::warp_reduce(m, detail::MaxOp{});
    float sum = 0.0f;
    for (std::size_t e = lane; e < E; e += detail::kWarpSize) sum += expf(detail::to_float(x[e]) - m);
    sum = detail::warp_reduce(sum, detail::SumOp{});
    // Each lane writes, and later reads back, only its own experts e = lane, lane + 32, ...
    float* p = probs + r * E;
    for (std::size_t e = lane; e < E; e += detail::kWarpSize) p[e] = expf(detail::to_float(x[e]) - m) / sum;

    // Pick j: the warp's first expert (in rank order) among those ranked after pick j - 1.
    float prev_key = INFINITY;  // before every key: pick 0 may be any expert
    int prev = -1;
    float selected_sum = 0.0f;  // S = sum_j p_j, in j order (the same in every lane)
    for (std::size_t j = 0; j < k; ++j) {
      float best_key = -2.0f, best_p = 0.0f;  // -2: below every key, so any expert wins
      int best = INT_MAX;
      for (std::size_t e = lane; e < E; e += detail::kWarpSize) {
        const float pe = p[e], key = moe_rank_key(pe);
        const int ei = static_cast<int>(e);
        if (moe_ranks_before(prev_key, prev, key, ei) && moe_ranks_before(key, ei, best_key, best)) {
          best_key = key;
          best = ei;
          best_p = pe;
        }
      }
      // argmax over the lanes (the order is total, so every lane ends with the same winner)
      for (unsigned offset = detail::kWarpSize / 2; offset > 0; offset /= 2) {
        const float other_key = __shfl_xor_sync(kMoeFullMask, best_key, offset);
        const int other = __shfl_xor_sync(kMoeFullMask, best, offset);
        const float other_p = __shfl_xor_sync(kMoeFullMask, best_p, offset);
        if (moe_ranks_before(other_key, other, best_key, best)) {
          best_key = other_key;
          best = other;
          best_p = other_p;
        }
      }
      if (lane == 0) {
        experts[r * k + j] = best;
        weights[r * k + j] = best_p;  // p_j for now
      }
      selected_sum += best_p;
      prev_key = best_key;
      prev = best;
    }
    // w_j = p_j / S or p_j, rounded to the storage type (lane 0 reads back its own writes)
    if (lane == 0)
      for (std::size_t j = 0; j < k; ++j) {
        const float w = renormalize ? weights[r * k + j] / selected_sum : weights[r * k + j];
        weights[r * k + j] = detail::to_float(detail::from_float<D>(w));
      }
  }
}

// dp_e of one row: aux_e (or 0), plus each pick j of expert e's term, j in order (the CPU's sums).
__device__ __forceinline__ float moe_router_dp(std::size_t e, const float* aux_dprobs, const std::int32_t* chosen,
                                               const float* dw, std::size_t k, bool renormalize, float S, float dot) {
  float dp = aux_dprobs ? aux_dprobs[e] : 0.0f;
  for (std::size_t j = 0; j < k; ++j)
    if (static_cast<std::size_t>(chosen[j]) == e) dp += renormalize ? (dw[j] - dot) / S : dw[j];
  return dp;
}

// Row r (one warp): dp as in moe.h, then dlogits_e = p_e (dp_e - sum_i p_i dp_i). S and
// sum_i dw_i w_i are computed by every lane alike (k terms each).
template <typename D>
__global__ void moe_router_backward_kernel(D* dlogits, const float* dweights, const float* aux_dprobs,
                                           const float* probs, const std::int32_t* experts, std::size_t N,
                                           std::size_t E, std::size_t k, bool renormalize) {
  const unsigned lane = moe_lane();
  for (std::size_t r = moe_first_warp_row(); r < N; r += moe_warp_row_step()) {
    const float* p = probs + r * E;
    const std::int32_t* chosen = experts + r * k;
    const float* dw = dweights + r * k;
    float S = 0.0f, dot = 0.0f;
    if (renormalize) {
      for (std::size_t j = 0; j < k; ++j) S += p[chosen[j]];
      for (std::size_t i = 0; i < k; ++i) dot += dw[i] * (p[chosen[i]] / S);  // sum_i dw_i w_i
    }
    float part = 0.0f;
    for (std::size_t e = lane; e < E; e += detail::kWarpSize)
      part += p[e] * moe_router_dp(e, aux_dprobs, chosen, dw, k, renormalize, S, dot);
    const float p_dp = detail::warp_reduce(part, detail::SumOp{});  // sum_i p_i dp_i
    D* d = dlogits + r * E;
    for (std::size_t e = lane; e < E; e += detail::kWarpSize)
      d[e] = detail::from_float<D>(p[e] * (moe_router_dp(e, aux_dprobs, chosen, dw, k, renormalize, S, dot) - p_dp));
  }
}

// Block e: sums[e] = sum_n probs[n, e], in double (the order: the file's comment).
__global__ void moe_expert_prob_sums_kernel(float* sums, const float* probs, std::size_t N, std::size_t E) {
  const std::size_t e = blockIdx.x;
  double acc = 0.0;
  for (std::size_t n = threadIdx.x; n < N; n += blockDim.x) acc += static_cast<double>(probs[n * E + e]);
  acc = detail::block_reduce(acc, detail::SumOp{}, 0.0);
  if (threadIdx.x == 0) sums[e] = static_cast<float>(acc);
}

// ---------------------------------------------------------------------------------------- plan

// Block e: counts[e] = the assignments naming expert e.
__global__ void moe_plan_counts_kernel(std::int32_t* counts, const std::int32_t* experts, std::size_t assignments) {
  const auto e = static_cast<std::int32_t>(blockIdx.x);
  unsigned mine = 0;
  for (std::size_t i = threadIdx.x; i < assignments; i += blockDim.x) mine += experts[i] == e ? 1u : 0u;
  mine = detail::block_reduce(mine, detail::SumOp{}, 0u);
  if (threadIdx.x == 0) counts[e] = static_cast<std::int32_t>(mine);
}

// Block e (kMoeBlock threads): rows[i] = offset[e] + the number of e's assignments before i, for
// every assignment i = n*k + j naming e. The block walks i in chunks of kMoeBlock; in a chunk,
// thread t's rank is the set bits of its warp's ballot below lane t plus the earlier warps' totals.
__global__ void moe_plan_rows_kernel(std::int32_t* rows, const std::int32_t* counts, const std::int32_t* experts,
                                     std::size_t assignments) {
  __shared__ unsigned warp_totals[kMoeWarpsPerBlock];
  __shared__ long long block_offset;
  const auto e = static_cast<std::int32_t>(blockIdx.x);
  const unsigned lane = moe_lane(), warp = threadIdx.x / detail::kWarpSize;
  if (threadIdx.x == 0) {
    long long offset = 0;  // sum_{e' < e} counts[e']
    for (std::int32_t lower = 0; lower < e; ++lower) offset += counts[lower];
    block_offset = offset;
  }
  __syncthreads();
  long long next = block_offset;
  for (std::size_t chunk = 0; chunk < assignments; chunk += kMoeBlock) {  // the same trips for every thread
    const std::size_t i = chunk + threadIdx.x;
    const bool is_mine = i < assignments && experts[i] == e;
    const unsigned ballot = __ballot_sync(kMoeFullMask, is_mine);
    unsigned rank = __popc(ballot & ((1u << lane) - 1u));  // this warp's earlier lanes
    if (lane == 0) warp_totals[warp] = __popc(ballot);
    __syncthreads();
    unsigned chunk_total = 0;
    for (unsigned w = 0; w < kMoeWarpsPerBlock; ++w) {
      if (w < warp) rank += warp_totals[w];
      chunk_total += warp_totals[w];
    }
    if (is_mine) rows[i] = static_cast<std::int32_t>(next + rank);
    next += chunk_total;
    __syncthreads();  // every warp has read warp_totals before the next chunk overwrites them
  }
}

// ---------------------------------------------------------------------------------------- dispatch, combine

// Element i = (n*k + j)*C + c of the assignments' rows:  grouped[rows[n,j], c] = x[n, c].
template <typename D>
__global__ void moe_dispatch_kernel(D* grouped, const D* x, const std::int32_t* rows, std::size_t N, std::size_t k,
                                    std::size_t C) {
  const std::size_t total = N * k * C;
  for (std::size_t i = detail::global_thread_index(); i < total; i += detail::grid_stride()) {
    const std::size_t a = i / C, c = i % C, n = a / k;
    grouped[static_cast<std::size_t>(rows[a]) * C + c] = x[n * C + c];
  }
}

// Element i = n*C + c:  dx[n, c] = sum_j dgrouped[rows[n,j], c], j in order.
template <typename D>
__global__ void moe_dispatch_backward_kernel(D* dx, const D* dgrouped, const std::int32_t* rows, std::size_t N,
                                             std::size_t k, std::size_t C) {
  const std::size_t total = N * C;
  for (std::size_t i = detail::global_thread_index(); i < total; i += detail::grid_stride()) {
    const std::size_t n = i / C, c = i % C;
    float sum = 0.0f;
    for (std::size_t j = 0; j < k; ++j)
      sum += detail::to_float(dgrouped[static_cast<std::size_t>(rows[n * k + j]) * C + c]);
    dx[i] = detail::from_float<D>(sum);
  }
}

// Element i = n*C + c:  out = residual + (sum_j w_j expert_out[rows[n,j], c] + s shared_out[n, c]).
// out may be residual or shared_out: the thread reads element i of both before it writes it.
template <typename D>
__global__ void moe_combine_kernel(D* out, const D* residual, const D* expert_out, const float* weights,
                                   const std::int32_t* rows, const D* shared_out, const D* shared_gate, std::size_t N,
                                   std::size_t k, std::size_t C) {
  const std::size_t total = N * C;
  for (std::size_t i = detail::global_thread_index(); i < total; i += detail::grid_stride()) {
    const std::size_t n = i / C, c = i % C;
    float y = 0.0f;
    for (std::size_t j = 0; j < k; ++j)
      y += weights[n * k + j] * detail::to_float(expert_out[static_cast<std::size_t>(rows[n * k + j]) * C + c]);
    if (shared_out) {
      float s, one_minus_s;
      moe_sigmoid(detail::to_float(shared_gate[n]), s, one_minus_s);
      y += s * detail::to_float(shared_out[i]);
    }
    out[i] = detail::from_float<D>(detail::to_float(residual[i]) + y);
  }
}

// Item (n, j) of N * slots (one warp each; slots = k, plus one for the shared row):
//   j < k:   dweights[n,j] = sum_c dout[n,c] expert_out[r,c];  dexpert_out[r,c] = w dout[n,c]   (r = rows[n,j])
//   j == k:  dshared_gate[n] = s (1 - s) sum_c dout[n,c] shared_out[n,c];  dshared[n,c] = s dout[n,c]
// The warp reduction needs every lane's loads, so the row is read in full before it is written.
template <typename D>
__global__ void moe_combine_backward_kernel(D* dexpert_out, float* dweights, D* dshared, D* dshared_gate,
                                            const D* dout, const D* expert_out, const float* weights,
                                            const std::int32_t* rows, const D* shared_out, const D* shared_gate,
                                            std::size_t N, std::size_t k, std::size_t C) {
  const unsigned lane = moe_lane();
  const std::size_t slots = k + (shared_out ? 1 : 0), items = N * slots;
  for (std::size_t item = moe_first_warp_row(); item < items; item += moe_warp_row_step()) {
    const std::size_t n = item / slots, j = item % slots;  // the same in every lane of the warp
    const D* d = dout + n * C;
    if (j < k) {
      const std::size_t r = static_cast<std::size_t>(rows[n * k + j]);
      const D* eo = expert_out + r * C;
      float part = 0.0f;
      for (std::size_t c = lane; c < C; c += detail::kWarpSize) part += detail::to_float(d[c]) * detail::to_float(eo[c]);
      const float dot = detail::warp_reduce(part, detail::SumOp{});
      if (lane == 0) dweights[n * k + j] = dot;
      const float w = weights[n * k + j];
      D* de = dexpert_out + r * C;
      for (std::size_t c = lane; c < C; c += detail::kWarpSize) de[c] = detail::from_float<D>(w * detail::to_float(d[c]));
    } else {
      float s, one_minus_s;
      moe_sigmoid(detail::to_float(shared_gate[n]), s, one_minus_s);
      const D* sh = shared_out + n * C;
      float part = 0.0f;
      for (std::size_t c = lane; c < C; c += detail::kWarpSize) part += detail::to_float(d[c]) * detail::to_float(sh[c]);
      const float dot = detail::warp_reduce(part, detail::SumOp{});
      if (lane == 0) dshared_gate[n] = detail::from_float<D>((s * one_minus_s) * dot);
      D* ds = dshared + n * C;
      for (std::size_t c = lane; c < C; c += detail::kWarpSize) ds[c] = detail::from_float<D>(s * detail::to_float(d[c]));
    }
  }
}

// ---------------------------------------------------------------------------------------- shared gate

// Row n (one warp): logits[n] = sum_c x[n,c] weight[c].
template <typename D>
__global__ void moe_shared_gate_forward_kernel(D* logits, const D* x, const D* weight, std::size_t N, std::size_t C) {
  const unsigned lane = moe_lane();
  for (std::size_t n = moe_first_warp_row(); n < N; n += moe_warp_row_step()) {
    float part = 0.0f;
    for (std::size_t c = lane; c < C; c += detail::kWarpSize)
      part += detail::to_float(x[n * C + c]) * detail::to_float(weight[c]);
    const float dot = detail::warp_reduce(part, detail::SumOp{});
    if (lane == 0) logits[n] = detail::from_float<D>(dot);
  }
}

// Block (32 x 8) -> columns blockIdx.x * 32 + threadIdx.x, all N rows:
//   dweight[c] += sum_n dlogits[n] x[n,c]   (row lane y: rows y, y + 8, ...; then lanes 0..7 in order)
template <typename D>
__global__ void moe_shared_gate_dweight_kernel(D* dweight, const D* dlogits, const D* x, std::size_t N, std::size_t C) {
  __shared__ float lane_sums[kMoeRowLanes][kMoeColTile];
  const std::size_t c = static_cast<std::size_t>(blockIdx.x) * kMoeColTile + threadIdx.x;
  float sum = 0.0f;
  if (c < C)
    for (std::size_t n = threadIdx.y; n < N; n += kMoeRowLanes)
      sum += detail::to_float(dlogits[n]) * detail::to_float(x[n * C + c]);
  lane_sums[threadIdx.y][threadIdx.x] = sum;  // every thread reaches the barrier
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (unsigned y = 1; y < kMoeRowLanes; ++y) sum += lane_sums[y][threadIdx.x];
    dweight[c] = detail::from_float<D>(detail::to_float(dweight[c]) + sum);
  }
}

// Element i = n*C + c:  dx[n,c] += dlogits[n] weight[c].
template <typename D>
__global__ void moe_shared_gate_dx_kernel(D* dx, const D* dlogits, const D* weight, std::size_t N, std::size_t C) {
  const std::size_t total = N * C;
  for (std::size_t i = detail::global_thread_index(); i < total; i += detail::grid_stride()) {
    const std::size_t n = i / C, c = i % C;
    dx[i] = detail::from_float<D>(detail::to_float(dx[i]) + detail::to_float(dlogits[n]) * detail::to_float(weight[c]));
  }
}

}  // namespace

template <typename T>
void moe_router_forward(void* stream, float* probs, std::int32_t* experts, float* weights, In<T> logits,
                        std::size_t N, std::size_t E, std::size_t k, bool renormalize) {
  check_moe_top_k("moe_router_forward", E, k);
  if (N == 0) return;
  moe_router_forward_kernel<<<detail::grid_for(N, kMoeWarpsPerBlock), kMoeBlock, 0, detail::as_stream(stream)>>>(
      probs, experts, weights, detail::device_cast(logits), N, E, k, renormalize);
  CUDA_CHECK_LAUNCH("moe_router_forward_kernel");
}

template <typename T>
void moe_router_backward(void* stream, Out<T> dlogits, const float* dweights, const float* aux_dprobs,
                         const float* probs, const std::int32_t* experts, std::size_t N, std::size_t E,
                         std::size_t k, bool renormalize) {
  check_moe_top_k("moe_router_backward", E, k);
  if (N == 0) return;
  moe_router_backward_kernel<<<detail::grid_for(N, kMoeWarpsPerBlock), kMoeBlock, 0, detail::as_stream(stream)>>>(
      detail::device_cast(dlogits), dweights, aux_dprobs, probs, experts, N, E, k, renormalize);
  CUDA_CHECK_LAUNCH("moe_router_backward_kernel");
}

void moe_expert_prob_sums(void* stream, float* sums, const float* probs, std::size_t N, std::size_t E) {
  if (E == 0) return;
  moe_expert_prob_sums_kernel<<<detail::exact_grid(E, 1, "moe_expert_prob_sums experts"), kMoeBlock, 0,
                                detail::as_stream(stream)>>>(sums, probs, N, E);
  CUDA_CHECK_LAUNCH("moe_expert_prob_sums_kernel");
}

void moe_plan(void* stream, std::int32_t* rows, std::int32_t* counts, const std::int32_t* experts, std::size_t N,
              std::size_t E, std::size_t k) {
  check_moe_rows("moe_plan", N, k);
  if (E == 0) return;
  const std::size_t assignments = N * k;
  const cudaStream_t s = detail::as_stream(stream);
  const unsigned grid = detail::exact_grid(E, 1, "moe_plan experts");
  moe_plan_counts_kernel<<<grid, kMoeBlock, 0, s>>>(counts, experts, assignments);  // zeros when there is nothing
  CUDA_CHECK_LAUNCH("moe_plan_counts_kernel");
  if (assignments == 0) return;
  moe_plan_rows_kernel<<<grid, kMoeBlock, 0, s>>>(rows, counts, experts, assignments);
  CUDA_CHECK_LAUNCH("moe_plan_rows_kernel");
}

template <typename T>
void moe_dispatch(void* stream, Out<T> grouped, In<T> x, const std::int32_t* rows, std::size_t N, std::size_t k,
                  std::size_t C) {
  if (N == 0 || k == 0 || C == 0) return;
  moe_dispatch_kernel<<<detail::grid_for(N * k * C, kMoeBlock), kMoeBlock, 0, detail::as_stream(stream)>>>(
      detail::device_cast(grouped), detail::device_cast(x), rows, N, k, C);
  CUDA_CHECK_LAUNCH("moe_dispatch_kernel");
}

template <typename T>
void moe_dispatch_backward(void* stream, Out<T> dx, In<T> dgrouped, const std::int32_t* rows, std::size_t N,
                           std::size_t k, std::size_t C) {
  if (N == 0 || C == 0) return;
  moe_dispatch_backward_kernel<<<detail::grid_for(N * C, kMoeBlock), kMoeBlock, 0, detail::as_stream(stream)>>>(
      detail::device_cast(dx), detail::device_cast(dgrouped), rows, N, k, C);
  CUDA_CHECK_LAUNCH("moe_dispatch_backward_kernel");
}

template <typename T>
void moe_combine(void* stream, Out<T> out, In<T> residual, In<T> expert_out, const float* weights,
                 const std::int32_t* rows, In<T> shared_out, In<T> shared_gate, std::size_t N, std::size_t k,
                 std::size_t C) {
  check_moe_shared("moe_combine", shared_out != nullptr, shared_gate != nullptr);
  if (N == 0 || C == 0) return;
  moe_combine_kernel<<<detail::grid_for(N * C, kMoeBlock), kMoeBlock, 0, detail::as_stream(stream)>>>(
      detail::device_cast(out), detail::device_cast(residual), detail::device_cast(expert_out), weights, rows,
      detail::device_cast(shared_out), detail::device_cast(shared_gate), N, k, C);
  CUDA_CHECK_LAUNCH("moe_combine_kernel");
}

template <typename T>
void moe_combine_backward(void* stream, Out<T> dexpert_out, float* dweights, Out<T> dshared, Out<T> dshared_gate,
                          In<T> dout, In<T> expert_out, const float* weights, const std::int32_t* rows,
                          In<T> shared_out, In<T> shared_gate, std::size_t N, std::size_t k, std::size_t C) {
  check_moe_shared("moe_combine_backward", shared_out != nullptr, shared_gate != nullptr);
  check_moe_shared("moe_combine_backward", shared_out != nullptr, dshared != nullptr);
  check_moe_shared("moe_combine_backward", shared_out != nullptr, dshared_gate != nullptr);
  const std::size_t items = N * (k + (shared_out ? 1 : 0));
  if (items == 0) return;
  moe_combine_backward_kernel<<<detail::grid_for(items, kMoeWarpsPerBlock), kMoeBlock, 0,
                                detail::as_stream(stream)>>>(
      detail::device_cast(dexpert_out), dweights, detail::device_cast(dshared), detail::device_cast(dshared_gate),
      detail::device_cast(dout), detail::device_cast(expert_out), weights, rows, detail::device_cast(shared_out),
      detail::device_cast(shared_gate), N, k, C);
  CUDA_CHECK_LAUNCH("moe_combine_backward_kernel");
}

template <typename T>
void moe_shared_gate_forward(void* stream, Out<T> logits, In<T> x, In<T> weight, std::size_t N, std::size_t C) {
  if (N == 0) return;
  moe_shared_gate_forward_kernel<<<detail::grid_for(N, kMoeWarpsPerBlock), kMoeBlock, 0,
                                   detail::as_stream(stream)>>>(detail::device_cast(logits), detail::device_cast(x),
                                                                detail::device_cast(weight), N, C);
  CUDA_CHECK_LAUNCH("moe_shared_gate_forward_kernel");
}

template <typename T>
void moe_shared_gate_backward(void* stream, Out<T> dx, Out<T> dweight, In<T> dlogits, In<T> x, In<T> weight,
                              std::size_t N, std::size_t C) {
  if (N == 0 || C == 0) return;
  const cudaStream_t s = detail::as_stream(stream);
  moe_shared_gate_dweight_kernel<<<detail::exact_grid(C, kMoeColTile, "moe_shared_gate_backward columns"),
                                   dim3(kMoeColTile, kMoeRowLanes), 0, s>>>(
      detail::device_cast(dweight), detail::device_cast(dlogits), detail::device_cast(x), N, C);
  CUDA_CHECK_LAUNCH("moe_shared_gate_dweight_kernel");
  moe_shared_gate_dx_kernel<<<detail::grid_for(N * C, kMoeBlock), kMoeBlock, 0, s>>>(
      detail::device_cast(dx), detail::device_cast(dlogits), detail::device_cast(weight), N, C);
  CUDA_CHECK_LAUNCH("moe_shared_gate_dx_kernel");
}

#define TRAINMEM_INSTANTIATE(T)                                                                                     \
  template void moe_router_forward<T>(void*, float*, std::int32_t*, float*, In<T>, std::size_t, std::size_t,       \
                                      std::size_t, bool);                                                          \
  template void moe_router_backward<T>(void*, Out<T>, const float*, const float*, const float*, const std::int32_t*, \
                                       std::size_t, std::size_t, std::size_t, bool);                               \
  template void moe_dispatch<T>(void*, Out<T>, In<T>, const std::int32_t*, std::size_t, std::size_t, std::size_t);  \
  template void moe_dispatch_backward<T>(void*, Out<T>, In<T>, const std::int32_t*, std::size_t, std::size_t,       \
                                         std::size_t);                                                             \
  template void moe_combine<T>(void*, Out<T>, In<T>, In<T>, const float*, const std::int32_t*, In<T>, In<T>,        \
                               std::size_t, std::size_t, std::size_t);                                             \
  template void moe_combine_backward<T>(void*, Out<T>, float*, Out<T>, Out<T>, In<T>, In<T>, const float*,          \
                                        const std::int32_t*, In<T>, In<T>, std::size_t, std::size_t, std::size_t); \
  template void moe_shared_gate_forward<T>(void*, Out<T>, In<T>, In<T>, std::size_t, std::size_t);                 \
  template void moe_shared_gate_backward<T>(void*, Out<T>, Out<T>, In<T>, In<T>, In<T>, std::size_t, std::size_t);
TRAINMEM_INSTANTIATE(float)
TRAINMEM_INSTANTIATE(bf16)
TRAINMEM_INSTANTIATE(fp16)
#undef TRAINMEM_INSTANTIATE

}  // namespace trainmem::kernels::cuda
