// What the attention kernels' CPU tests share (test_flash_attention_cpu.cpp,
// test_attention_gqa_cpu.cpp): the check that the double reference's backward is its derivative.
#pragma once
#include <cstddef>
#include <vector>

#include "kernels/flash_attention.h"
#include "kernels/tests/gradient_check.h"

namespace trainmem::kernels::attention_test {

// The double reference's backward against central differences of its forward (gradient_check.h):
// loss = sum(out * r), so dout = r. Off by O(h^2) (~1e-12) plus the forward's rounding over 2h
// (~1e-16 / 1e-6 = 1e-10): a test asks the worst difference to be below 1e-8 of the largest
// gradient. qkv is restored as it was.
inline gradient_check::DerivativeCheck reference_backward_check(std::vector<double>& qkv, const std::vector<double>& r,
                                                                const AttentionShape& s) {
  std::vector<double> out(r.size()), lse(s.B * s.H * s.T), dqkv(qkv.size());
  cpu::attention_reference_backward(dqkv.data(), r.data(), qkv.data(), s);
  return gradient_check::central_differences(qkv, dqkv, [&] {
    cpu::attention_reference_forward(out.data(), lse.data(), qkv.data(), s);
    double l = 0;
    for (std::size_t i = 0; i < out.size(); ++i) l += out[i] * r[i];
    return l;
  });
}

}  // namespace trainmem::kernels::attention_test
