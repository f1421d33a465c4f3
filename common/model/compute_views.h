// fp32 views of tensors that may be stored in 16 bits: how mixed precision computes in fp32 with
// the fp32 kernels while storing bf16/fp16 (on the CPU always; on a GPU for every op except the
// matmuls, which run on tensor cores directly, see GPT::linear_forward).
//
//   Read(t)        const float*: t itself when it is fp32; else a widened fp32 copy (exact)
//   Write(t)       float* to write: t itself, or fp32 scratch rounded into t when the view dies
//   Update(t)      float* to read and write (accumulated outputs such as weight gradients, and
//                  in-place ops): widened first, rounded back when the view dies
//
// A view made as a call's argument dies at the end of that statement, after the call:
//   kernels::gelu_forward(s, Write(d, out), Read(d, in), n);   // computes, then rounds `out`
// Rounding is to nearest, ties to even (kernels/convert.h), the GPU's __float2bfloat16_rn.
// The scratch copies are tensors of category workspace, so the allocator sees what widening
// costs; for fp32 tensors a view is only the pointer (no copy, bit-identical to no views).
#pragma once
#include "common/device/device.h"
#include "common/tensor/tensor.h"

namespace trainmem {

// Copies between a 16-bit tensor and fp32 device memory (n = t.numel() elements).
void widen_to_f32(Device& device, float* out, const Tensor& t);
void narrow_from_f32(Device& device, Tensor& t, const float* in);

class Read {
 public:
  Read(Device& device, const Tensor& t);
  operator const float*() const { return ptr_; }

 private:
  Tensor scratch_;
  const float* ptr_;
};

class Write {
 public:
  Write(Device& device, Tensor& t) : Write(device, t, /*widen=*/false) {}
  ~Write() noexcept(false);  // rounds the scratch into the tensor (may report a CUDA error)
  Write(const Write&) = delete;
  Write& operator=(const Write&) = delete;
  operator float*() const { return ptr_; }

 protected:
  Write(Device& device, Tensor& t, bool widen);

 private:
  Device& device_;
  Tensor& target_;
  Tensor scratch_;
  float* ptr_;
};

class Update : public Write {
 public:
  Update(Device& device, Tensor& t) : Write(device, t, /*widen=*/true) {}
};

}  // namespace trainmem
