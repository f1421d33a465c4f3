#include "common/comm/rank_order_sum.h"

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "kernels/convert.h"

namespace trainmem {

void widen_elements(DType dtype, const void* in, float* out, std::size_t n) {
  if (n == 0) return;  // an empty piece may have no buffer at all
  const auto* h = static_cast<const std::uint16_t*>(in);
  switch (dtype) {
    case DType::f32: std::memcpy(out, in, n * sizeof(float)); return;
    case DType::bf16: kernels::cpu::from_bf16(out, h, n); return;
    case DType::f16: kernels::cpu::from_fp16(out, h, n); return;
    default: break;
  }
  throw std::invalid_argument("widen_elements: sums are of fp32, bf16 or fp16 elements");
}

void round_elements(DType dtype, const float* in, void* out, std::size_t n) {
  if (n == 0) return;
  auto* h = static_cast<std::uint16_t*>(out);
  switch (dtype) {
    case DType::f32: std::memcpy(out, in, n * sizeof(float)); return;
    case DType::bf16: kernels::cpu::to_bf16(h, in, n); return;
    case DType::f16: kernels::cpu::to_fp16(h, in, n); return;
    default: break;
  }
  throw std::invalid_argument("round_elements: sums are of fp32, bf16 or fp16 elements");
}

void add_in_rank_order(const void* blocks, std::size_t world, std::size_t n, DType dtype, float* sum) {
  const auto* bytes = static_cast<const std::byte*>(blocks);
  const std::size_t block_bytes = n * dtype_size(dtype);
  widen_elements(dtype, bytes, sum, n);  // rank 0's values
  if (dtype == DType::f32) {
    for (std::size_t r = 1; r < world; ++r) {
      const auto* x = reinterpret_cast<const float*>(bytes + r * block_bytes);
      for (std::size_t i = 0; i < n; ++i) sum[i] += x[i];
    }
    return;
  }
  std::vector<float> wide(n);
  for (std::size_t r = 1; r < world; ++r) {
    widen_elements(dtype, bytes + r * block_bytes, wide.data(), n);
    for (std::size_t i = 0; i < n; ++i) sum[i] += wide[i];
  }
}

}  // namespace trainmem
