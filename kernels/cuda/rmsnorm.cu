// CUDA: RMSNorm forward and backward over rows of C (formulas in rmsnorm.h; the CPU reference is
// cpu/rmsnorm.cpp). Sums are taken in fp32 here (the reference sums a row in double).
//
// Thread mappings:
//   forward            one warp per row; lanes stride over the row's C columns.
//   backward, dx       one warp per row (dx is ACCUMULATED: dx += ...).
//   backward, dweight  a column reduction over the N rows in two kernels (dweight is ACCUMULATED):
//     1. partials: the rows are cut into bands (rmsnorm_backward_bands, rmsnorm.h); a 32 x 8
//        block owns 32 columns of one band and writes the band's fp32 sums of those columns to
//        the caller's workspace (partial[band][c]);
//     2. finish:   one thread per column adds the old value and every band's partial, band 0
//        first, in fp32, and rounds once.
//     Every sum has a fixed order (no atomics), so the result is the same bits on every run.
//
// Storage types: every kernel is a template over the element type D of x, out, weight and the
// gradients (float, __nv_bfloat16, __half; dtype.cuh); rstd is always float. Loads widen to float,
// sums are float, each output is rounded once.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/dtype.cuh"
#include "kernels/rmsnorm.h"

namespace trainmem::kernels::cuda {

namespace {

// (Names start with RmsNorm: a unity build may put this file beside layernorm.cu.)
constexpr unsigned kRmsNormWarpsPerBlock = 8;
constexpr unsigned kRmsNormRowBlock = kRmsNormWarpsPerBlock * detail::kWarpSize;  // 256 threads
constexpr unsigned kRmsNormColTile = 32;      // columns per block of the dweight partials (threadIdx.x)
constexpr unsigned kRmsNormRowLanes = 8;      // row lanes per block of the partials (threadIdx.y)
constexpr unsigned kRmsNormFinishBlock = 256;  // columns per block of the finishing sum

// Row r (one warp; r is the same for all 32 lanes, so a whole warp exits together):
//   rstd = 1 / sqrt(sum_c x[r,c]^2 / C + eps);   out[r,c] = (x[r,c] * rstd) * weight[c]
// Warp w of block b handles rows b*8 + w, then steps by gridDim.x * 8.
template <typename D>
__global__ void rmsnorm_forward_kernel(D* out, float* rstd, const D* x, const D* weight, std::size_t N, std::size_t C,
                                       float eps) {
  const unsigned lane = threadIdx.x % detail::kWarpSize;
  const std::size_t first_row =
      static_cast<std::size_t>(blockIdx.x) * kRmsNormWarpsPerBlock + threadIdx.x / detail::kWarpSize;
  const std::size_t row_step = static_cast<std::size_t>(gridDim.x) * kRmsNormWarpsPerBlock;
  const float inv_c = 1.0f / static_cast<float>(C);
  for (std::size_t r = first_row; r < N; r += row_step) {
    const D* xr = x + r * C;
    float sum_sq = 0.0f;
    for (std::size_t c = lane; c < C; c += detail::kWarpSize) {
      const float v = detail::to_float(xr[c]);
      sum_sq += v * v;
    }
    const float mean_sq = detail::warp_reduce(sum_sq, detail::SumOp{}) * inv_c;
    const float s = 1.0f / sqrtf(mean_sq + eps);
    D* o = out + r * C;
    for (std::size_t c = lane; c < C; c += detail::kWarpSize)
      o[c] = detail::from_float<D>(detail::to_float(xr[c]) * s * detail::to_float(weight[c]));
    if (lane == 0) rstd[r] = s;
  }
}

// Row r (one warp), with xhat = x * rstd[r] and g = dout * weight:
//   dx[r,c] += rstd[r] * (g - xhat * mean_c(g * xhat))
// Pass 1 reduces the mean over the row (every lane gets it); pass 2 updates dx.
template <typename D>
__global__ void rmsnorm_backward_dx_kernel(D* dx, const D* dout, const D* x, const D* weight, const float* rstd,
                                           std::size_t N, std::size_t C) {
  const unsigned lane = threadIdx.x % detail::kWarpSize;
  const std::size_t first_row =
      static_cast<std::size_t>(blockIdx.x) * kRmsNormWarpsPerBlock + threadIdx.x / detail::kWarpSize;
  const std::size_t row_step = static_cast<std::size_t>(gridDim.x) * kRmsNormWarpsPerBlock;
  const float inv_c = 1.0f / static_cast<float>(C);
  for (std::size_t r = first_row; r < N; r += row_step) {
    const D* xr = x + r * C;
    const D* dr = dout + r * C;
    const float s = rstd[r];
    float g_xhat_sum = 0.0f;
    for (std::size_t c = lane; c < C; c += detail::kWarpSize) {
      const float xhat = detail::to_float(xr[c]) * s;
      const float g = detail::to_float(dr[c]) * detail::to_float(weight[c]);
      g_xhat_sum += g * xhat;
    }
    const float g_xhat_mean = detail::warp_reduce(g_xhat_sum, detail::SumOp{}) * inv_c;
    D* dxr = dx + r * C;
    for (std::size_t c = lane; c < C; c += detail::kWarpSize) {
      const float xhat = detail::to_float(xr[c]) * s;
      const float g = detail::to_float(dr[c]) * detail::to_float(weight[c]);
      dxr[c] = detail::from_float<D>(detail::to_float(dxr[c]) + s * (g - xhat * g_xhat_mean));
    }
  }
}

// Step 1, the band partials (no accumulation here):
//   dw_partial[band][c] = sum over the band's rows r of dout[r,c] * x[r,c] * rstd[r]
// Block (32 x 8) -> column tile blockIdx.x and band blockIdx.y (rows [band*band_rows, + band_rows),
// clipped to N). threadIdx.x -> column c = blockIdx.x * 32 + threadIdx.x (consecutive threads read
// consecutive addresses of a row: coalesced); threadIdx.y -> the band's rows first + threadIdx.y,
// stepping by 8. The 8 row-lane sums of a column meet in shared memory and are added by lane 0 in
// order y = 0..7. Every block writes its 32 partials (the workspace need not be cleared).
template <typename D>
__global__ void rmsnorm_backward_partials_kernel(float* dw_partial, const D* dout, const D* x, const float* rstd,
                                                 std::size_t N, std::size_t C, std::size_t band_rows) {
  __shared__ float dw_lanes[kRmsNormRowLanes][kRmsNormColTile];
  const std::size_t c = static_cast<std::size_t>(blockIdx.x) * kRmsNormColTile + threadIdx.x;
  const std::size_t band = blockIdx.y;
  const std::size_t first = band * band_rows;
  const std::size_t end = first + band_rows < N ? first + band_rows : N;
  float dw = 0.0f;
  if (c < C) {
    for (std::size_t r = first + threadIdx.y; r < end; r += kRmsNormRowLanes) {
      const std::size_t i = r * C + c;
      dw += detail::to_float(dout[i]) * (detail::to_float(x[i]) * rstd[r]);
    }
  }
  // Every thread reaches the barrier (no early return above).
  dw_lanes[threadIdx.y][threadIdx.x] = dw;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (unsigned y = 1; y < kRmsNormRowLanes; ++y) dw += dw_lanes[y][threadIdx.x];
    dw_partial[band * C + c] = dw;
  }
}

// Step 2: dweight[c] += sum over bands of dw_partial[band][c].
// Thread -> column c: it alone owns dweight[c]; it starts from the old value, adds the bands in
// order 0, 1, ... in fp32 (reads of one band are coalesced across the threads) and rounds once.
template <typename D>
__global__ void rmsnorm_backward_finish_kernel(D* dweight, const float* dw_partial, std::size_t bands, std::size_t C) {
  const std::size_t c = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float dw = detail::to_float(dweight[c]);
  for (std::size_t band = 0; band < bands; ++band) dw += dw_partial[band * C + c];
  dweight[c] = detail::from_float<D>(dw);
}

}  // namespace

template <typename T>
void rmsnorm_forward(void* stream, Out<T> out, float* rstd, In<T> x, In<T> weight, std::size_t N, std::size_t C,
                     float eps) {
  if (N == 0 || C == 0) return;
  rmsnorm_forward_kernel<<<detail::grid_for(N, kRmsNormWarpsPerBlock), kRmsNormRowBlock, 0,
                           detail::as_stream(stream)>>>(detail::device_cast(out), rstd, detail::device_cast(x),
                                                        detail::device_cast(weight), N, C, eps);
  CUDA_CHECK_LAUNCH("rmsnorm_forward_kernel");
}

template <typename T>
void rmsnorm_backward(void* stream, Out<T> dx, Out<T> dweight, In<T> dout, In<T> x, In<T> weight, const float* rstd,
                      void* workspace, std::size_t N, std::size_t C) {
  if (N == 0 || C == 0) return;
  if (workspace == nullptr || reinterpret_cast<std::uintptr_t>(workspace) % alignof(float) != 0)
    throw std::invalid_argument("rmsnorm_backward: the workspace must be rmsnorm_backward_workspace_bytes(N, C) = " +
                                std::to_string(rmsnorm_backward_workspace_bytes(N, C)) +
                                " bytes, 4-byte aligned (got " + (workspace ? "a misaligned" : "a null") + " pointer)");
  const cudaStream_t s = detail::as_stream(stream);
  rmsnorm_backward_dx_kernel<<<detail::grid_for(N, kRmsNormWarpsPerBlock), kRmsNormRowBlock, 0, s>>>(
      detail::device_cast(dx), detail::device_cast(dout), detail::device_cast(x), detail::device_cast(weight), rstd, N,
      C);
  CUDA_CHECK_LAUNCH("rmsnorm_backward_dx_kernel");

  const RmsNormBands bands = rmsnorm_backward_bands(N);  // at most 256: fits gridDim.y
  float* dw_partial = static_cast<float*>(workspace);
  const dim3 grid(detail::exact_grid(C, kRmsNormColTile, "rmsnorm_backward columns"),
                  static_cast<unsigned>(bands.count));
  const dim3 block(kRmsNormColTile, kRmsNormRowLanes);
  rmsnorm_backward_partials_kernel<<<grid, block, 0, s>>>(dw_partial, detail::device_cast(dout),
                                                          detail::device_cast(x), rstd, N, C, bands.rows);
  CUDA_CHECK_LAUNCH("rmsnorm_backward_partials_kernel");
  rmsnorm_backward_finish_kernel<<<detail::exact_grid(C, kRmsNormFinishBlock, "rmsnorm_backward finish"),
                                   kRmsNormFinishBlock, 0, s>>>(detail::device_cast(dweight), dw_partial, bands.count,
                                                                C);
  CUDA_CHECK_LAUNCH("rmsnorm_backward_finish_kernel");
}

#define TRAINMEM_INSTANTIATE(T)                                                                                  \
  template void rmsnorm_forward<T>(void*, Out<T>, float*, In<T>, In<T>, std::size_t, std::size_t, float);        \
  template void rmsnorm_backward<T>(void*, Out<T>, Out<T>, In<T>, In<T>, In<T>, const float*, void*, std::size_t, \
                                    std::size_t);
TRAINMEM_INSTANTIATE(float)
TRAINMEM_INSTANTIATE(bf16)
TRAINMEM_INSTANTIATE(fp16)
#undef TRAINMEM_INSTANTIATE

}  // namespace trainmem::kernels::cuda
