// CUDA: LayerNorm forward and backward over rows of C (formulas in layernorm.h; the CPU reference
// is cpu/layernorm.cpp). Statistics are accumulated in fp32 here (the reference uses double); the
// mean is subtracted before squaring (two passes), which keeps the variance accurate.
//
// Thread mappings:
//   forward                 one warp per row; lanes stride over the row's C columns.
//   backward, dx            one warp per row (dx is ACCUMULATED: dx += ...).
//   backward, dweight/dbias a column reduction over the N rows in two kernels (they are
//                           ACCUMULATED as well):
//     1. partials: the rows are cut into bands (layernorm_backward_bands, layernorm.h); a 32 x 8
//        block owns 32 columns of one band and writes the band's fp32 sums of those columns to
//        the caller's workspace (partial[band][c]);
//     2. finish:   one thread per column adds the old value and every band's partial, band 0
//        first, in fp32, and rounds once.
//     Every sum has a fixed order (no atomics), so the result is the same bits on every run, and
//     the C/32 x bands blocks of step 1 keep the GPU busy whatever C is.
//
// Storage types: every kernel is a template over the element type D of x, out, weight, bias and
// the gradients (float, __nv_bfloat16, __half; dtype.cuh); mean and rstd are always float. Loads
// widen to float, sums are float, each output is rounded once.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/dtype.cuh"
#include "kernels/layernorm.h"

namespace trainmem::kernels::cuda {

namespace {

constexpr unsigned kWarpsPerBlock = 8;
constexpr unsigned kRowBlock = kWarpsPerBlock * detail::kWarpSize;  // 256 threads
constexpr unsigned kColTile = 32;   // columns per block of the dweight/dbias partials (threadIdx.x)
constexpr unsigned kRowLanes = 8;   // row lanes per block of the partials (threadIdx.y)
constexpr unsigned kFinishBlock = 256;  // columns per block of the finishing sum

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

// Step 1, the band partials (no accumulation here):
//   dw_partial[band][c] = sum over the band's rows r of dout[r,c] * xhat[r,c]
//   db_partial[band][c] = sum over the band's rows r of dout[r,c]
// Block (32 x 8) -> column tile blockIdx.x and band blockIdx.y (rows [band*band_rows, + band_rows),
// clipped to N). threadIdx.x -> column c = blockIdx.x * 32 + threadIdx.x (consecutive threads read
// consecutive addresses of a row: coalesced); threadIdx.y -> the band's rows first + threadIdx.y,
// stepping by 8. The 8 row-lane sums of a column meet in shared memory and are added by lane 0 in
// order y = 0..7. Every block writes its 32 x 2 partials (the workspace need not be cleared).
template <typename D>
__global__ void layernorm_backward_partials_kernel(float* dw_partial, float* db_partial, const D* dout, const D* x,
                                                   const float* mean, const float* rstd, std::size_t N, std::size_t C,
                                                   std::size_t band_rows) {
  __shared__ float dw_lanes[kRowLanes][kColTile];
  __shared__ float db_lanes[kRowLanes][kColTile];
  const std::size_t c = static_cast<std::size_t>(blockIdx.x) * kColTile + threadIdx.x;
  const std::size_t band = blockIdx.y;
  const std::size_t first = band * band_rows;
  const std::size_t end = first + band_rows < N ? first + band_rows : N;
  float dw = 0.0f, db = 0.0f;
  if (c < C) {
    for (std::size_t r = first + threadIdx.y; r < end; r += kRowLanes) {
      const std::size_t i = r * C + c;
      const float d = detail::to_float(dout[i]);
      const float xhat = (detail::to_float(x[i]) - mean[r]) * rstd[r];
      dw += d * xhat;
      db += d;
    }
  }
  // Every thread reaches the barrier (no early return above).
  dw_lanes[threadIdx.y][threadIdx.x] = dw;
  db_lanes[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (unsigned y = 1; y < kRowLanes; ++y) {
      dw += dw_lanes[y][threadIdx.x];
      db += db_lanes[y][threadIdx.x];
    }
    dw_partial[band * C + c] = dw;
    db_partial[band * C + c] = db;
  }
}

// Step 2: dweight[c] += sum over bands of dw_partial[band][c]; dbias[c] likewise.
// Thread -> column c: it alone owns dweight[c] and dbias[c]; it starts from the old value, adds
// the bands in order 0, 1, ... in fp32 (reads of one band are coalesced across the threads) and
// rounds once.
template <typename D>
__global__ void layernorm_backward_finish_kernel(D* dweight, D* dbias, const float* dw_partial, const float* db_partial,
                                                 std::size_t bands, std::size_t C) {
  const std::size_t c = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float dw = detail::to_float(dweight[c]), db = detail::to_float(dbias[c]);
  for (std::size_t band = 0; band < bands; ++band) {
    dw += dw_partial[band * C + c];
    db += db_partial[band * C + c];
  }
  dweight[c] = detail::from_float<D>(dw);
  dbias[c] = detail::from_float<D>(db);
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
                        const float* mean, const float* rstd, void* workspace, std::size_t N, std::size_t C) {
  if (N == 0 || C == 0) return;
  if (workspace == nullptr || reinterpret_cast<std::uintptr_t>(workspace) % alignof(float) != 0)
    throw std::invalid_argument("layernorm_backward: the workspace must be layernorm_backward_workspace_bytes(N, C) = " +
                                std::to_string(layernorm_backward_workspace_bytes(N, C)) +
                                " bytes, 4-byte aligned (got " + (workspace ? "a misaligned" : "a null") + " pointer)");
  const cudaStream_t s = detail::as_stream(stream);
  layernorm_backward_dx_kernel<<<detail::grid_for(N, kWarpsPerBlock), kRowBlock, 0, s>>>(
      detail::device_cast(dx), detail::device_cast(dout), detail::device_cast(x), detail::device_cast(weight), mean,
      rstd, N, C);
  CUDA_CHECK_LAUNCH("layernorm_backward_dx_kernel");

  const LayerNormBands bands = layernorm_backward_bands(N);  // at most 256: fits gridDim.y
  float* dw_partial = static_cast<float*>(workspace);
  float* db_partial = dw_partial + bands.count * C;
  const dim3 grid(detail::exact_grid(C, kColTile, "layernorm_backward columns"), static_cast<unsigned>(bands.count));
  const dim3 block(kColTile, kRowLanes);
  layernorm_backward_partials_kernel<<<grid, block, 0, s>>>(dw_partial, db_partial, detail::device_cast(dout),
                                                            detail::device_cast(x), mean, rstd, N, C, bands.rows);
  CUDA_CHECK_LAUNCH("layernorm_backward_partials_kernel");
  layernorm_backward_finish_kernel<<<detail::exact_grid(C, kFinishBlock, "layernorm_backward finish"), kFinishBlock, 0,
                                     s>>>(detail::device_cast(dweight), detail::device_cast(dbias), dw_partial,
                                          db_partial, bands.count, C);
  CUDA_CHECK_LAUNCH("layernorm_backward_finish_kernel");
}

#define TRAINMEM_INSTANTIATE(T)                                                                                    \
  template void layernorm_forward<T>(void*, Out<T>, float*, float*, In<T>, In<T>, In<T>, std::size_t, std::size_t); \
  template void layernorm_backward<T>(void*, Out<T>, Out<T>, Out<T>, In<T>, In<T>, In<T>, const float*,            \
                                      const float*, void*, std::size_t, std::size_t);
TRAINMEM_INSTANTIATE(float)
TRAINMEM_INSTANTIATE(bf16)
TRAINMEM_INSTANTIATE(fp16)
#undef TRAINMEM_INSTANTIATE

}  // namespace trainmem::kernels::cuda
