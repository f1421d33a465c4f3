// What the SwiGLU tests (test_swiglu_cpu.cpp, test_swiglu_cuda.cu) share: their inputs (random
// ones, and gates far out on both sides) and the CPU kernel's outputs on them. Host code only.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/swiglu.h"
#include "kernels/tests/dtype_test_support.h"

namespace trainmem::kernels::swiglu_test {

// The inputs of one forward (gate, up) and backward (and dout).
template <typename T>
struct SwigluInputs {
  std::vector<T> gate, up, dout;
};

// n random values each (never zero), seeded `seed`, seed + 1 and seed + 2: gates in [-8, 8] (far
// into both tails of the sigmoid), up in [-2, 2], dout in [-1, 1].
template <typename T>
SwigluInputs<T> random_swiglu_inputs(std::size_t n, std::uint64_t seed) {
  return {dtype_test::random_values<T>(n, seed, -8.0, 8.0), dtype_test::random_values<T>(n, seed + 1, -2.0, 2.0),
          dtype_test::random_values<T>(n, seed + 2, -1.0, 1.0)};
}

// Gates far out on both sides, each magnitude with both signs: sigma(+-100), around the fp32 exp's
// cut-off at 87, and T's largest finite value; up = +-0.75 (so that silu(g) up stays finite) and
// dout = +-0.5.
template <typename T>
SwigluInputs<T> extreme_swiglu_inputs() {
  const std::vector<double> magnitudes = {1e-3, 0.5, 1.28, 20, 86.9, 87.5, 88, 100, 1e4,
                                          dtype_test::largest_finite<T>()};
  SwigluInputs<T> in;
  for (const double m : magnitudes) {
    for (const double sign : {1.0, -1.0}) {
      in.gate.push_back(store<T>(static_cast<compute_t<T>>(sign * m)));
      in.up.push_back(store<T>(static_cast<compute_t<T>>(in.gate.size() % 2 ? 0.75 : -0.75)));
      in.dout.push_back(store<T>(static_cast<compute_t<T>>(in.gate.size() % 3 ? -0.5 : 0.5)));
    }
  }
  return in;
}

template <typename T>
struct SwigluOutputs {
  std::vector<T> out, dgate, dup;
};

// The CPU kernel's forward and backward, out of place, in the inputs' type.
template <typename T>
SwigluOutputs<T> cpu_swiglu(const std::vector<T>& gate, const std::vector<T>& up, const std::vector<T>& dout) {
  const std::size_t n = gate.size();
  SwigluOutputs<T> o{std::vector<T>(n), std::vector<T>(n), std::vector<T>(n)};
  cpu::swiglu_forward(o.out.data(), gate.data(), up.data(), n);
  cpu::swiglu_backward(o.dgate.data(), o.dup.data(), dout.data(), gate.data(), up.data(), n);
  return o;
}

}  // namespace trainmem::kernels::swiglu_test
