// The model's storage types (common/model/precision.h) as C++ types, for code that calls the
// kernels, which read and write float, kernels::bf16 or kernels::fp16 directly (kernels/dtype.h):
//
//   with_storage_type(t.dtype(), [&](auto tag) {
//     using T = decltype(tag);
//     kernels::gelu_forward<T>(s, out.data_as<T>(), in.data_as<T>(), n);
//   });
//
// And the two whole-tensor conversions the optimizers need for their fp32 master weights.
#pragma once
#include <stdexcept>
#include <string>

#include "common/device/device.h"
#include "common/tensor/tensor.h"
#include "kernels/dtype.h"

namespace trainmem {

// Runs body(T{}) with T the C++ type of `dtype`: float, kernels::bf16 or kernels::fp16.
template <typename Body>
void with_storage_type(DType dtype, Body&& body) {
  switch (dtype) {
    case DType::f32: return body(float{});
    case DType::bf16: return body(kernels::bf16{});
    case DType::f16: return body(kernels::fp16{});
    default: throw std::logic_error("a model stores f32, bf16 or f16, not " + std::string(to_string(dtype)));
  }
}

// out (numel fp32 values on the device) = t widened (exact); t is bf16 or f16.
void widen_to_f32(Device& device, float* out, const Tensor& t);
// t = in rounded to t's 16-bit type (nearest, ties to even).
void narrow_from_f32(Device& device, Tensor& t, const float* in);

}  // namespace trainmem
