// What the storage-type tests need, once: random inputs in a storage type (never zero), widening
// and rounding whole vectors, and three comparisons with their failure messages:
//   same_bits     bit for bit (the 16-bit kernel against "widen, fp32 kernel, round");
//   within_ulps   at most k units in the last place of the storage type;
//   close_to      |got - ref| <= atol + rtol * |ref| against a double reference.
// Host code only (no CUDA): the CPU and CUDA tests both use it.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <iomanip>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/dtype.h"

namespace trainmem::kernels::dtype_test {

// The storage types every CPU kernel takes, for TYPED_TEST_SUITE.
using StorageTypes = ::testing::Types<float, bf16, fp16>;

// GoogleTest names for the typed tests: KernelsDtypeCpu/bf16.GeluForward, ...
struct DtypeNames {
  template <typename T>
  static std::string GetName(int) {
    return dtype_name<T>();
  }
};

// n token ids in [0, vocab), seeded (embedding and cross-entropy tests).
inline std::vector<std::int32_t> random_tokens(std::size_t n, std::uint64_t seed, std::int32_t vocab) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int32_t> dist(0, vocab - 1);
  std::vector<std::int32_t> v(n);
  for (std::int32_t& x : v) x = dist(rng);
  return v;
}

// The unit roundoff of a storage type: rounding to nearest changes a value by at most u relative,
// u = 2^-p for p significant bits (fp32 24, bf16 8, fp16 11; double 53).
template <typename T>
constexpr double unit_roundoff() {
  if constexpr (std::is_same_v<T, bf16>) {
    return 0x1p-8;
  } else if constexpr (std::is_same_v<T, fp16>) {
    return 0x1p-11;
  } else if constexpr (std::is_same_v<T, double>) {
    return 0x1p-53;
  } else {
    return 0x1p-24;
  }
}

// |got - ref| <= atol + rtol * |ref|
struct Tolerance {
  double atol;
  double rtol;
};

// The tolerance of an output rounded once to T, computed in fp32 from the same inputs as a double
// reference: rtol = u(T) for the rounding, plus fp32_rel and fp32_abs for the kernel's own fp32
// arithmetic (which the reference does not share; sums with cancellation need the absolute part).
// fp16 outputs below 2^-14 are subnormal, rounded to a multiple of 2^-24: up to 2^-25 absolute.
template <typename T>
Tolerance rounded_once(double fp32_rel, double fp32_abs) {
  return {fp32_abs + (std::is_same_v<T, fp16> ? 0x1p-25 : 0.0), unit_roundoff<T>() + fp32_rel};
}

// n values uniform in [lo, hi], rounded to T; never zero (a value that rounds to 0 is drawn again).
template <typename T>
std::vector<T> random_values(std::size_t n, std::uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(n);
  for (T& x : v) {
    do {
      x = store<T>(static_cast<compute_t<T>>(dist(rng)));
    } while (load(x) == 0);
  }
  return v;
}

template <typename T>
std::vector<float> widen(const std::vector<T>& v) {
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = load(v[i]);
  return out;
}

template <typename T>
std::vector<double> to_double(const std::vector<T>& v) {
  std::vector<double> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = load(v[i]);
  return out;
}

template <typename T>
std::vector<T> narrow(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = store<T>(v[i]);
  return out;
}

// The bit pattern of one element, as an integer.
template <typename T>
std::uint64_t bits_of(T x) {
  static_assert(sizeof(T) <= 8);
  std::uint64_t u = 0;
  std::memcpy(&u, &x, sizeof(T));
  return u;
}

template <typename T>
::testing::AssertionResult same_bits(const std::string& what, const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << what << ": " << got.size() << " values vs " << want.size();
  std::size_t wrong = 0;
  std::ostringstream first;
  first << std::setprecision(9);
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (bits_of(got[i]) == bits_of(want[i])) continue;
    if (wrong < 5) first << "\n    [" << i << "] got " << load(got[i]) << "  want " << load(want[i]);
    ++wrong;
  }
  if (wrong == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << " (" << dtype_name<T>() << "): " << wrong << " of " << got.size()
                                       << " values differ in their bits; first ones:" << first.str();
}

// The position of x on the number line of T, counted in representable values (so that the
// distance between two values is their difference in units in the last place; +0 and -0 are 0).
template <typename T>
std::int64_t ordinal(T x) {
  const std::uint64_t u = bits_of(x);
  const int bits = 8 * static_cast<int>(sizeof(T));
  const std::uint64_t sign = std::uint64_t{1} << (bits - 1);
  const auto magnitude = static_cast<std::int64_t>(u & (sign - 1));
  return (u & sign) ? -magnitude : magnitude;
}

// Every value at most max_ulps units in the last place from `want`; reports how many differ at all.
template <typename T>
::testing::AssertionResult within_ulps(const std::string& what, const std::vector<T>& got, const std::vector<T>& want,
                                       std::int64_t max_ulps, std::size_t* differing = nullptr) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << what << ": " << got.size() << " values vs " << want.size();
  std::size_t wrong = 0, differ = 0;
  std::int64_t worst = 0;
  std::ostringstream first;
  first << std::setprecision(9);
  for (std::size_t i = 0; i < got.size(); ++i) {
    const std::int64_t d = std::llabs(ordinal(got[i]) - ordinal(want[i]));
    if (d != 0) ++differ;
    worst = std::max(worst, d);
    if (d <= max_ulps) continue;
    if (wrong < 5) first << "\n    [" << i << "] got " << load(got[i]) << "  want " << load(want[i]) << "  (" << d << " ulps)";
    ++wrong;
  }
  if (differing) *differing = differ;
  if (wrong == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << " (" << dtype_name<T>() << "): " << wrong << " of " << got.size()
                                       << " values more than " << max_ulps << " ulps away (worst " << worst
                                       << "); first ones:" << first.str();
}

// Every |got[i] - want[i]| <= allowed(i) (false for NaN); the failure names the first few and the
// worst ratio to the bound.
template <typename V>
::testing::AssertionResult within_bounds(const std::string& what, const std::vector<V>& got,
                                         const std::vector<double>& want,
                                         const std::function<double(std::size_t)>& allowed) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << what << ": " << got.size() << " values vs " << want.size();
  std::size_t wrong = 0;
  double worst = 0;
  std::ostringstream first;
  first << std::setprecision(9);
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(load(got[i])), diff = std::fabs(g - want[i]), a = allowed(i);
    if (diff <= a) continue;
    worst = std::max(worst, a > 0 ? diff / a : INFINITY);
    if (wrong < 5) first << "\n    [" << i << "] got " << g << "  want " << want[i] << "  |diff| " << diff << "  allowed " << a;
    ++wrong;
  }
  if (wrong == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << wrong << " of " << got.size()
                                       << " values beyond their bound (worst " << worst << " x the bound); first ones:"
                                       << first.str();
}

// |got - ref| <= atol + rtol |ref|, element by element.
template <typename T>
::testing::AssertionResult close_to(const std::string& what, const std::vector<T>& got, const std::vector<double>& ref,
                                    Tolerance tol) {
  std::ostringstream named;
  named << what << " (" << dtype_name<T>() << ", atol " << tol.atol << " + rtol " << tol.rtol << " * |ref|)";
  return within_bounds(named.str(), got, ref, [&](std::size_t i) { return tol.atol + tol.rtol * std::fabs(ref[i]); });
}

// The largest finite value of each storage type (bf16: 3.39e38, fp16: 65504).
template <typename T>
double largest_finite() {
  if constexpr (std::is_same_v<T, bf16>) {
    return load(bf16{0x7f7f});
  } else if constexpr (std::is_same_v<T, fp16>) {
    return load(fp16{0x7bff});
  } else {
    return static_cast<double>(std::numeric_limits<T>::max());
  }
}

}  // namespace trainmem::kernels::dtype_test
