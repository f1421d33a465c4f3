// Small helpers shared by the CUDA kernels: launch sizes, and warp / block reductions.
// Included by kernels/cuda/*.cu only (needs nvcc).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>

namespace trainmem::kernels::cuda::detail {

constexpr unsigned kWarpSize = 32;

inline cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

// Blocks for a grid-stride loop over `work` items with `per_block` items per block. Capped: the
// kernels loop, so a capped grid still covers everything (and gridDim.x stays far below 2^31).
inline unsigned grid_for(std::size_t work, std::size_t per_block, std::size_t max_blocks = 65535u * 16u) {
  const std::size_t blocks = (work + per_block - 1) / per_block;
  return static_cast<unsigned>(blocks < max_blocks ? (blocks > 0 ? blocks : 1) : max_blocks);
}

// Blocks for a kernel that does NOT loop: exactly ceil(work / per_block), which must fit gridDim.x.
inline unsigned exact_grid(std::size_t work, std::size_t per_block, const char* what) {
  const std::size_t blocks = (work + per_block - 1) / per_block;
  if (blocks == 0 || blocks > 0x7fffffffu)
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(blocks) + " blocks do not fit a grid");
  return static_cast<unsigned>(blocks);
}

// Index of this thread and stride of a 1-D grid-stride loop, in 64 bits (n may exceed 2^31).
__device__ __forceinline__ std::size_t global_thread_index() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::size_t grid_stride() { return static_cast<std::size_t>(gridDim.x) * blockDim.x; }

struct SumOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Reduces `value` over the 32 lanes of a warp; every lane gets the result (butterfly with xor).
// All 32 lanes must call it (full mask).
template <typename T, typename Op>
__device__ __forceinline__ T warp_reduce(T value, Op op) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) value = op(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}

// Reduces `value` over the whole block; every thread gets the result. Every thread of the block
// must call it (it has barriers), and blockDim.x must be a multiple of 32 (at most 1024).
// Each warp reduces its lanes, lane 0 of each warp writes one partial to shared memory, then every
// warp reduces those partials itself (so no third barrier is needed to broadcast the result).
// The barrier at the start makes back-to-back calls safe: the shared partials of the previous
// call may still be being read by a slower warp.
template <typename T, typename Op>
__device__ T block_reduce(T value, Op op, T identity) {
  __shared__ T partials[kWarpSize];
  const unsigned lane = threadIdx.x % kWarpSize;
  const unsigned warp = threadIdx.x / kWarpSize;
  const unsigned num_warps = blockDim.x / kWarpSize;
  value = warp_reduce(value, op);
  __syncthreads();
  if (lane == 0) partials[warp] = value;
  __syncthreads();
  value = lane < num_warps ? partials[lane] : identity;
  return warp_reduce(value, op);
}

}  // namespace trainmem::kernels::cuda::detail
