// The storage types of kernels/dtype.h on the GPU: kernels::bf16 is __nv_bfloat16, kernels::fp16
// is __half (same 2 bytes), float is float. A host function of a .cu file takes the strong types
// of the header and hands its kernel the CUDA types (device_cast); the kernel loads each element
// into float (to_float, exact), computes in float and stores each output once (from_float<D>,
// rounded to nearest even: __float2bfloat16_rn / __float2half_rn, the CPU's rounding bit for bit).
// Included by kernels/cuda/*.cu only (needs nvcc).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "kernels/dtype.h"

namespace trainmem::kernels::cuda::detail {

template <typename T>
struct DeviceType {
  using type = T;  // float
};
template <>
struct DeviceType<bf16> {
  using type = __nv_bfloat16;
};
template <>
struct DeviceType<fp16> {
  using type = __half;
};
template <typename T>
using device_t = typename DeviceType<T>::type;

template <typename T>
device_t<T>* device_cast(T* p) {
  static_assert(sizeof(device_t<T>) == sizeof(T), "a storage type and its CUDA type have the same size");
  return reinterpret_cast<device_t<T>*>(p);
}
template <typename T>
const device_t<T>* device_cast(const T* p) {
  static_assert(sizeof(device_t<T>) == sizeof(T), "a storage type and its CUDA type have the same size");
  return reinterpret_cast<const device_t<T>*>(p);
}

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

template <typename D>
__device__ __forceinline__ D from_float(float x) {
  if constexpr (std::is_same_v<D, __nv_bfloat16>) {
    return __float2bfloat16_rn(x);
  } else if constexpr (std::is_same_v<D, __half>) {
    return __float2half_rn(x);
  } else {
    return x;
  }
}

}  // namespace trainmem::kernels::cuda::detail
