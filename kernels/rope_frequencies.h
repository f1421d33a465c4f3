// RoPE's rotation frequencies (kernels/rope.h), one per pair i of a head of D elements:
//   freq_i = theta^(-2i/D)                                   i in [0, D/2)
// and, where the model was trained for a longer context than its first one, Llama 3.1's
// rescaling of them (config.json's rope_scaling {"rope_type": "llama3", "factor", "low_freq_factor",
// "high_freq_factor", "original_max_position_embeddings"}; transformers'
// _compute_llama3_parameters). With the wavelength w_i = 2 pi / freq_i and the original context L0:
//   w_i < L0 / high_freq_factor   (high frequencies)  freq_i unchanged
//   w_i > L0 / low_freq_factor    (low frequencies)   freq_i / factor
//   otherwise (a smooth blend)                          (1 - s) freq_i / factor + s freq_i,
//                                 s = (L0 / w_i - low_freq_factor) / (high_freq_factor - low_freq_factor)
// The scaling changes no shape, no memory and no cost: only which angle a position turns by.
// Computed in double on both backends (rope.h says why); host and device code alike.
#pragma once
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

#if defined(__CUDACC__)
#define TRAINMEM_ROPE_HOST_DEVICE __host__ __device__
#else
#define TRAINMEM_ROPE_HOST_DEVICE
#endif

namespace trainmem::kernels {

struct RopeFrequencies {
  double theta = 10000;  // the base (Llama 2: 10000; Llama 3: 500000)
  // Llama 3.1's rescaling; factor 1 is none (the other three are then not read).
  double factor = 1;
  double low_freq_factor = 1, high_freq_factor = 4;
  double original_context = 8192;  // L0: original_max_position_embeddings

  // A plain base: rope_forward(..., 10000.0) rotates by theta^(-2i/D).
  RopeFrequencies(double base = 10000) : theta(base) {}  // NOLINT(google-explicit-constructor): a base is a frequency set
  static RopeFrequencies llama3(double base, double factor, double low_freq_factor, double high_freq_factor,
                                double original_context) {
    RopeFrequencies f(base);
    f.factor = factor;
    f.low_freq_factor = low_freq_factor;
    f.high_freq_factor = high_freq_factor;
    f.original_context = original_context;
    return f;
  }
  bool scaled() const { return factor != 1; }

  TRAINMEM_ROPE_HOST_DEVICE double operator()(std::size_t i, std::size_t D) const {
    const double freq = pow(theta, -(2.0 * static_cast<double>(i)) / static_cast<double>(D));
    if (factor == 1) return freq;
    const double wavelength = 2 * 3.14159265358979323846 / freq;  // (std::numbers::pi is not usable in device code)
    if (wavelength < original_context / high_freq_factor) return freq;
    if (wavelength > original_context / low_freq_factor) return freq / factor;
    const double s = (original_context / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor);
    return (1 - s) * freq / factor + s * freq;
  }

  // What both backends refuse (a message naming the op).
  void check(const char* op) const {
    if (!(theta > 0)) throw std::invalid_argument(std::string(op) + ": theta must be positive");
    if (!scaled()) return;
    if (!(factor >= 1 && low_freq_factor > 0 && high_freq_factor > low_freq_factor && original_context > 0) ||
        !std::isfinite(factor) || !std::isfinite(high_freq_factor) || !std::isfinite(original_context))
      throw std::invalid_argument(std::string(op) + ": llama3 rope scaling needs factor >= 1, 0 < low_freq_factor < "
                                  "high_freq_factor and an original context above 0");
  }
};

}  // namespace trainmem::kernels
