// CPU reference: whole buffers fp32 <-> bf16 / fp16, bit for bit as CUDA's _rn intrinsics (the
// scalar conversions are in kernels/dtype.h).
#include "kernels/convert.h"

#include <vector>

namespace trainmem::kernels::cpu {

void to_bf16(std::uint16_t* out, const float* in, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = float_to_bf16(in[i]);
}
void from_bf16(float* out, const std::uint16_t* in, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = bf16_to_float(in[i]);
}
void to_fp16(std::uint16_t* out, const float* in, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = float_to_fp16(in[i]);
}
void from_fp16(float* out, const std::uint16_t* in, std::size_t n) {
  // All 65536 halves decoded once: widening is then a table lookup.
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (std::uint32_t h = 0; h < 65536; ++h) t[h] = fp16_to_float(static_cast<std::uint16_t>(h));
    return t;
  }();
  for (std::size_t i = 0; i < n; ++i) out[i] = table[in[i]];
}

}  // namespace trainmem::kernels::cpu
