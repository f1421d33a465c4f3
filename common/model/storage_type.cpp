#include "common/model/storage_type.h"

#include <cstdint>

#include "common/device/device_ops.h"
#include "kernels/convert.h"

namespace trainmem {

void widen_to_f32(Device& device, float* out, const Tensor& t) {
  const auto n = static_cast<std::size_t>(t.numel());
  const auto s = kernel_stream(device);
  switch (t.dtype()) {
    case DType::bf16: return kernels::from_bf16(s, out, t.data_as<std::uint16_t>(), n);
    case DType::f16: return kernels::from_fp16(s, out, t.data_as<std::uint16_t>(), n);
    default: throw std::logic_error("widen_to_f32: " + t.describe() + " is not a 16-bit float tensor");
  }
}

void narrow_from_f32(Device& device, Tensor& t, const float* in) {
  const auto n = static_cast<std::size_t>(t.numel());
  const auto s = kernel_stream(device);
  switch (t.dtype()) {
    case DType::bf16: return kernels::to_bf16(s, t.data_as<std::uint16_t>(), in, n);
    case DType::f16: return kernels::to_fp16(s, t.data_as<std::uint16_t>(), in, n);
    default: throw std::logic_error("narrow_from_f32: " + t.describe() + " is not a 16-bit float tensor");
  }
}

}  // namespace trainmem
