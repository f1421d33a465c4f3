#include "common/model/compute_views.h"

#include <cstdint>

#include "common/device/device_ops.h"
#include "kernels/convert.h"

namespace trainmem {

namespace {
Tensor f32_scratch(Device& device, const Tensor& t) {
  return Tensor(device.allocator(), t.shape(), DType::f32, MemoryCategory::workspace, t.name() + ".f32");
}
}  // namespace

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

Read::Read(Device& device, const Tensor& t) {
  if (t.dtype() == DType::f32) {
    ptr_ = t.data_as<float>();
    return;
  }
  scratch_ = f32_scratch(device, t);
  widen_to_f32(device, scratch_.data_as<float>(), t);
  ptr_ = scratch_.data_as<float>();
}

Write::Write(Device& device, Tensor& t, bool widen) : device_(device), target_(t) {
  if (t.dtype() == DType::f32) {
    ptr_ = t.data_as<float>();
    return;
  }
  scratch_ = f32_scratch(device, t);
  ptr_ = scratch_.data_as<float>();
  if (widen) widen_to_f32(device, ptr_, t);
}

Write::~Write() noexcept(false) {
  if (scratch_.data() != nullptr) narrow_from_f32(device_, target_, ptr_);
}

}  // namespace trainmem
