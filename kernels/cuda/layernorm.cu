// CUDA: LayerNorm forward and backward over rows of C (formulas in layernorm.h; the CPU reference
// is cpu/layernorm.cpp). Statistics are accumulated in fp32 here (the reference uses double); the
// mean is subtracted before squaring (two passes), which keeps the variance accurate.
//
// Thread mappings:
//   forward                 one warp per row; lanes stride over the row's C columns.
//   backward, dx            one warp per row (dx is ACCUMULATED: dx += ...).
//   backward, dweight/dbias a column reduction over the N rows: a 32 x 8 block owns 32 columns
//                           and a slice of the rows; its per-column partial sums are atomically
//                           added into dweight/dbias (they are ACCUMULATED as well).
//
// Storage types: every kernel is a template over the element type D of x, out, weight, bias and
// the gradients (float, __nv_bfloat16, __half; dtype.cuh); mean and rstd are always float. Loads
// widen to float, sums are float, each output is rounded once. In 16 bits dweight/dbias cannot be
// summed by atomicAdd (each addition would round): there a block owns its 32 columns over ALL the
// rows (one block along the rows), so each column has a single owner, which adds its fp32 sum to
// the old value and rounds once. That is C/32 blocks, fewer than the fp32 path launches: the price
// of rounding once without an fp32 scratch buffer.
#include <cstddef>
#include <type_traits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/dtype.cuh"
#include "kernels/layernorm.h"

namespace trainmem::kernels::cuda {

namespace {

constexpr unsigned kWarpsPerBlock = 8;
constexpr unsigned kRowBlock = kWarpsPerBlock * detail::kWarpSize;  // 256 threads
constexpr unsigned kColTile = 32;      // columns per block of the dweight/dbias reduction (threadIdx.x)
constexpr unsigned kRowLanes = 8;      // row lanes per block of that reduction (threadIdx.y)
constexpr std::size_t kRowsPerColBlock = 64;  // aim: each (32 x 8) block sums about 64 rows ...
constexpr unsigned kMaxColBlocksY = 256;      // ... with at most 256 blocks along the rows

// Row r (one warp; r is the same for all 32 lanes, so a whole warp exits together):
//   mean = sum_c x[r,c] / C;  var = sum_c (x[r,c] - mean)^2 / C;  rstd = 1 / sqrt(var + eps)
//   out[r,c] = (x[r,c] - mean) * rstd * weight[c] + bias[c]
// Warp w of block b handles rows b*8 + w, then steps by gridDim.x * 8.
template <typename D>
__global__ void layernorm_forward_kernel(D* out, float* mean, float* rstd, const D* x, const D* weight, const D* bias,
                                         std::size_t N, std::size_t C) {
  const unsigned lane = threadIdx.x % detail::kWarpSize;
  const std::size_t first_row = static_cast<std::size_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / detail::kWarpSize;
  const std::size_t row_step = static_cast<std::size_t>(gridDim.x) * kWarpsPerBlock;
  const float inv_c = 1.0f / static_cast<float>(C);
  for (std::size_t r = first_row; r < N; r += row_step) {
    const D* xr = x + r * C;
    float sum = 0.0f;
    for (std::size_t c = lane; c < C; c += detail::kWarpSize) sum += detail::to_float(xr[c]);
    const float m = detail::warp_reduce(sum, detail::SumOp{}) * inv_c;
    float sq = 0.0f;
    for (std::size_t c = lane; c < C; c += detail::kWarpSize) {
      const float diff = detail::to_float(xr[c]) - m;
      sq += diff * diff;
    }
    const float var = detail::warp_reduce(sq, detail::SumOp{}) * inv_c;
    const float s = 1.0f / sqrtf(var + static_cast<float>(kLayerNormEps));
    D* o = out + r * C;
    for (std::size_t c = lane; c < C; c += detail::kWarpSize)
      o[c] = detail::from_float<D>(((detail::to_float(xr[c]) - m) * s) * detail::to_float(weight[c]) +
                                   detail::to_float(bias[c]));
    if (lane == 0) {
      mean[r] = m;
      rstd[r] = s;
    }
  }
}

// Row r (one warp), with xhat = (x - mean[r]) * rstd[r] and g = dout * weight:
//   dx[r,c] += rstd[r] * (g - mean_c(g) - xhat * mean_c(g * xhat))
// Pass 1 reduces the two means over the row (every lane gets them); pass 2 updates dx.
template <typename D>
__global__ void layernorm_backward_dx_kernel(D* dx, const D* dout, const D* x, const D* weight, const float* mean,
                                             const float* rstd, std::size_t N, std::size_t C) {
  const unsigned lane = threadIdx.x % detail::kWarpSize;
  const std::size_t first_row = static_cast<std::size_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / detail::kWarpSize;
  const std::size_t row_step = static_cast<std::size_t>(gridDim.x) * kWarpsPerBlock;
  const float inv_c = 1.0f / static_cast<float>(C);
  for (std::size_t r = first_row; r < N; r += row_step) {
    const D* xr = x + r * C;
    const D* dr = dout + r * C;
    const float m = mean[r], s = rstd[r];
    float g_sum = 0.0f, g_xhat_sum = 0.0f;
    for (std::size_t c = lane; c < C; c += detail::kWarpSize) {
      const float xhat = (detail::to_float(xr[c]) - m) * s;
      const float g = detail::to_float(dr[c]) * detail::to_float(weight[c]);
      g_sum += g;
      g_xhat_sum += g * xhat;
    }
    const float g_mean = detail::warp_reduce(g_sum, detail::SumOp{}) * inv_c;
    const float g_xhat_mean = detail::warp_reduce(g_xhat_sum, detail::SumOp{}) * inv_c;
    D* dxr = dx + r * C;
    for (std::size_t c = lane; c < C; c += detail::kWarpSize) {
      const float xhat = (detail::to_float(xr[c]) - m) * s;
      const float g = detail::to_float(dr[c]) * detail::to_float(weight[c]);
      dxr[c] = detail::from_float<D>(detail::to_float(dxr[c]) + s * (g - g_mean - xhat * g_xhat_mean));
    }
  }
}

// Column sums over rows:  dweight[c] += sum_r dout[r,c] * xhat[r,c];   dbias[c] += sum_r dout[r,c].
// Block (32 x 8): threadIdx.x -> column c = blockIdx.x * 32 + threadIdx.x (consecutive threads read
// consecutive addresses of a row: coalesced); threadIdx.y -> rows blockIdx.y * 8 + threadIdx.y,
// stepping by gridDim.y * 8. The 8 row-lane partials of a column meet in shared memory, and one
// thread per column adds the block's sum into dweight/dbias with atomicAdd (several blocks share a
// column, so the order of the additions, hence the last bits, can vary from run to run).
// 16 bits: launched with gridDim.y == 1, so the block is the column's only owner: it adds its sum
// to the old value in fp32 and rounds once, instead of the atomicAdd.
template <typename D>
__global__ void layernorm_backward_param_kernel(D* dweight, D* dbias, const D* dout, const D* x, const float* mean,
                                                const float* rstd, std::size_t N, std::size_t C) {
  __shared__ float dw_partial[kRowLanes][kColTile];
  __shared__ float db_partial[kRowLanes][kColTile];
  const std::size_t c = static_cast<std::size_t>(blockIdx.x) * kColTile + threadIdx.x;
  float dw = 0.0f, db = 0.0f;
  if (c < C) {
    for (std::size_t r = static_cast<std::size_t>(blockIdx.y) * kRowLanes + threadIdx.y; r < N;
         r += static_cast<std::size_t>(gridDim.y) * kRowLanes) {
      const std::size_t i = r * C + c;
      const float d = detail::to_float(dout[i]);
      const float xhat = (detail::to_float(x[i]) - mean[r]) * rstd[r];
      dw += d * xhat;
      db += d;
    }
  }
  // Every thread reaches the barrier (no early return above).
  dw_partial[threadIdx.y][threadIdx.x] = dw;
  db_partial[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (unsigned y = 1; y < kRowLanes; ++y) {
      dw += dw_partial[y][threadIdx.x];
      db += db_partial[y][threadIdx.x];
    }
    if constexpr (std::is_same_v<D, float>) {
      atomicAdd(dweight + c, dw);
      atomicAdd(dbias + c, db);
    } else {
      dweight[c] = detail::from_float<D>(detail::to_float(dweight[c]) + dw);
      dbias[c] = detail::from_float<D>(detail::to_float(dbias[c]) + db);
    }
  }
}

}  // namespace

template <typename T>
void layernorm_forward(void* stream, Out<T> out, float* mean, float* rstd, In<T> x, In<T> weight, In<T> bias,
                       std::size_t N, std::size_t C) {
  if (N == 0 || C == 0) return;
  layernorm_forward_kernel<<<detail::grid_for(N, kWarpsPerBlock), kRowBlock, 0, detail::as_stream(stream)>>>(
      detail::device_cast(out), mean, rstd, detail::device_cast(x), detail::device_cast(weight),
      detail::device_cast(bias), N, C);
  CUDA_CHECK_LAUNCH("layernorm_forward_kernel");
}

template <typename T>
void layernorm_backward(void* stream, Out<T> dx, Out<T> dweight, Out<T> dbias, In<T> dout, In<T> x, In<T> weight,
                        const float* mean, const float* rstd, std::size_t N, std::size_t C) {
  if (N == 0 || C == 0) return;
  const cudaStream_t s = detail::as_stream(stream);
  layernorm_backward_dx_kernel<<<detail::grid_for(N, kWarpsPerBlock), kRowBlock, 0, s>>>(
      detail::device_cast(dx), detail::device_cast(dout), detail::device_cast(x), detail::device_cast(weight), mean,
      rstd, N, C);
  CUDA_CHECK_LAUNCH("layernorm_backward_dx_kernel");
  // fp32: blocks along the rows, their sums met by atomicAdd; 16 bits: one block along the rows
  const unsigned row_blocks = std::is_same_v<T, float> ? detail::grid_for(N, kRowsPerColBlock, kMaxColBlocksY) : 1u;
  const dim3 grid(detail::exact_grid(C, kColTile, "layernorm_backward"), row_blocks);
  const dim3 block(kColTile, kRowLanes);
  layernorm_backward_param_kernel<<<grid, block, 0, s>>>(detail::device_cast(dweight), detail::device_cast(dbias),
                                                         detail::device_cast(dout), detail::device_cast(x), mean, rstd,
                                                         N, C);
  CUDA_CHECK_LAUNCH("layernorm_backward_param_kernel");
}

#define TRAINMEM_INSTANTIATE(T)                                                                                    \
  template void layernorm_forward<T>(void*, Out<T>, float*, float*, In<T>, In<T>, In<T>, std::size_t, std::size_t); \
  template void layernorm_backward<T>(void*, Out<T>, Out<T>, Out<T>, In<T>, In<T>, In<T>, const float*,            \
                                      const float*, std::size_t, std::size_t);
TRAINMEM_INSTANTIATE(float)
TRAINMEM_INSTANTIATE(bf16)
TRAINMEM_INSTANTIATE(fp16)
#undef TRAINMEM_INSTANTIATE

}  // namespace trainmem::kernels::cuda
