// CUDA: fp32 <-> bf16 / fp16 with the round-to-nearest-even intrinsics (the CPU reference in
// cpu/convert.cpp reproduces them bit for bit). One thread per element, grid-stride loop.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/convert.h"

namespace trainmem::kernels::cuda {

namespace {

void check_launch(const char* name) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) throw std::runtime_error(std::string(name) + ": " + cudaGetErrorString(status));
}

unsigned blocks_for(std::size_t n) {
  const std::size_t blocks = (n + 255) / 256;
  return static_cast<unsigned>(blocks < 65535 * 16 ? blocks : 65535 * 16);
}

__global__ void to_bf16_kernel(std::uint16_t* out, const float* in, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(in[i]));
}
__global__ void from_bf16_kernel(float* out, const std::uint16_t* in, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    out[i] = __bfloat162float(__ushort_as_bfloat16(in[i]));
}
__global__ void to_fp16_kernel(std::uint16_t* out, const float* in, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    out[i] = __half_as_ushort(__float2half_rn(in[i]));
}
__global__ void from_fp16_kernel(float* out, const std::uint16_t* in, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    out[i] = __half2float(__ushort_as_half(in[i]));
}

}  // namespace

void to_bf16(void* stream, std::uint16_t* out, const float* in, std::size_t n) {
  if (n == 0) return;
  to_bf16_kernel<<<blocks_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(out, in, n);
  check_launch("to_bf16");
}
void from_bf16(void* stream, float* out, const std::uint16_t* in, std::size_t n) {
  if (n == 0) return;
  from_bf16_kernel<<<blocks_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(out, in, n);
  check_launch("from_bf16");
}
void to_fp16(void* stream, std::uint16_t* out, const float* in, std::size_t n) {
  if (n == 0) return;
  to_fp16_kernel<<<blocks_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(out, in, n);
  check_launch("to_fp16");
}
void from_fp16(void* stream, float* out, const std::uint16_t* in, std::size_t n) {
  if (n == 0) return;
  from_fp16_kernel<<<blocks_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(out, in, n);
  check_launch("from_fp16");
}

}  // namespace trainmem::kernels::cuda
