// How far the CUDA RMSNorm (kernels/cuda/rmsnorm.cu) may be from the CPU one (kernels/cpu/rmsnorm.cpp)
// on the same inputs in the same storage type: a bound per output element, derived from fp32's
// unit roundoff u = 2^-24 and the kernels' orders of summation, evaluated on the inputs (host code
// only; test_rmsnorm_cuda.cu uses it).
//
// Notation: gamma(n) = n u / (1 - n u), the relative error of a chain of n fp32 roundings (Higham,
// Accuracy and Stability of Numerical Algorithms, 2nd ed., eq. 3.4): a sum of terms, each a
// product rounded once (or fused into the add), that goes through n roundings is off by at most
// gamma(n) sum |terms|. Both sides read the same 16-bit (or fp32) values exactly and compute in
// fp32; the CPU sums a row in double (off by ~C 2^-53: negligible) and rounds the result once.
// Where the GPU fuses a multiply into an add (nvcc's default --fmad=true), it skips a rounding;
// each step below counts one rounding on each side, which covers it.
//
// Forward. The GPU's sum of squares: a lane adds k = ceil(C/32) squares, then 5 shuffle steps:
// gamma(k + 5). Times 1/C (rounded: u) and rounded (u); eps is rounded to fp32 (u) and added (u);
// sqrtf halves the relative error and adds u; 1/ adds u. So rstd_gpu is off by at most
// gamma(k + 5)/2 + 4u relative, and the CPU's (the double value rounded once) by u:
//   |rstd_gpu - rstd_cpu| <= rho |rstd_cpu|,   rho = gamma(k + 5)/2 + 5u.
// out = (x * rstd) * w, two roundings on each side: (rho + 4u) |x rstd w| before the rounding to T.
//
// Backward, from the same rstd (the CPU forward's). xhat = x * rstd is the same fp32 value on both
// sides; g = dout * w may be fused on the GPU. Per row, with A = mean_c |g xhat|:
//   m = mean_c(g * xhat): the CPU rounds each product (u A) and the mean (u |m|); the GPU's lane
//   and shuffle chain is gamma(k + 5) A and its 1/C and product 2u |m|:
//     |m_gpu - m_cpu| <= mu = (gamma(k + 5) + 4u) A        (|m| <= A)
//   dx = dx0 + rstd (g - xhat m), each step rounded on each side:
//     t = xhat m:   |xhat| mu + 2u |xhat m|
//     v = g - t:    + 3u (|g| + |xhat m|)        (g itself may be fused on the GPU)
//     rstd v:       times rstd, + 2u rstd (|g| + |xhat m|)
//     dx0 + rstd v: + 2u (|dx0| + rstd (|g| + |xhat m|))
//   so delta_dx = rstd |xhat| mu + u (rstd (7 |g| + 9 |xhat m|) + 2 |dx0|).
//   dweight = dw0 + sum_r dout xhat. The CPU adds the N rows in order: gamma(N + 1). The GPU: a
//   band of B rows (rmsnorm_backward_bands) is split over 8 row lanes (ceil(B/8) terms each), the
//   8 lane sums are added in order (7), and the finish adds dw0 and the bands' partials (count):
//   gamma(ceil(B/8) + 7 + count). So delta_dw = (gamma(N + 1) + gamma(ceil(B/8) + 7 + count)) W,
//   W = |dw0| + sum_r |dout xhat|.
//
// Rounding to T. Each side rounds its fp32 value v once: off by at most u_T |v| + a, with u_T the
// storage type's unit roundoff (0 for fp32, whose outputs are not rounded again) and a = 2^-25 for
// fp16 (subnormals below 2^-14), 0 otherwise. Two values delta apart in fp32 may then be
//   delta (1 + u_T) + 2 u_T |v_cpu| / (1 - u_T) + 2a  ...  <=  1.01 (delta + 2 u_T |cpu|) + 3a
// apart (u_T <= 2^-8). The factor 1.01 also covers every second-order term above.
#pragma once
#include <cmath>
#include <cstddef>
#include <vector>

#include "kernels/rmsnorm.h"

namespace trainmem::kernels::rmsnorm_test {

constexpr double kU32 = 0x1p-24;
inline double rmsnorm_gamma(double n) { return n * kU32 / (1 - n * kU32); }

// The rounding to the storage type: u_T (0 for fp32) and a (fp16's subnormal step / 2).
struct StorageRounding {
  double u = 0;
  double a = 0;
};
inline double rmsnorm_after_rounding(double delta, double cpu_value, StorageRounding r) {
  return 1.01 * (delta + 2 * r.u * std::fabs(cpu_value)) + 3 * r.a;
}

// Lanes' terms in the GPU's row sums: ceil(C/32) + the 5 shuffle steps.
inline double rmsnorm_row_chain(std::size_t C) { return static_cast<double>((C + 31) / 32 + 5); }

// rstd: relative (rstd is fp32 on both sides: no rounding to T).
inline double rmsnorm_rstd_rtol(std::size_t C) { return 1.01 * (rmsnorm_gamma(rmsnorm_row_chain(C)) / 2 + 5 * kU32); }

// out [N, C], from the widened inputs x [N, C], w [C] and the CPU's rstd [N]; cpu_out the CPU's output.
inline std::vector<double> rmsnorm_out_bounds(const std::vector<float>& x, const std::vector<float>& w,
                                              const std::vector<float>& rstd, const std::vector<float>& cpu_out,
                                              std::size_t N, std::size_t C, StorageRounding r) {
  const double rho = rmsnorm_gamma(rmsnorm_row_chain(C)) / 2 + 5 * kU32;
  std::vector<double> bound(N * C);
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t c = 0; c < C; ++c) {
      const std::size_t i = n * C + c;
      const double delta = (rho + 4 * kU32) * std::fabs(static_cast<double>(x[i]) * rstd[n] * w[c]);
      bound[i] = rmsnorm_after_rounding(delta, cpu_out[i], r);
    }
  return bound;
}

struct RmsNormBackwardBounds {
  std::vector<double> dx, dweight;
};

// From the widened inputs: dout, x [N, C], w [C], the rstd [N] both sides used, the starting
// values dx0 [N, C] and dw0 [C]; cpu_dx and cpu_dw the CPU's results.
inline RmsNormBackwardBounds rmsnorm_backward_bounds(const std::vector<float>& dout, const std::vector<float>& x,
                                                     const std::vector<float>& w, const std::vector<float>& rstd,
                                                     const std::vector<float>& dx0, const std::vector<float>& dw0,
                                                     const std::vector<float>& cpu_dx, const std::vector<float>& cpu_dw,
                                                     std::size_t N, std::size_t C, StorageRounding r) {
  RmsNormBackwardBounds b;
  b.dx.resize(N * C);
  const double row_gamma = rmsnorm_gamma(rmsnorm_row_chain(C));
  std::vector<double> W(C);
  for (std::size_t c = 0; c < C; ++c) W[c] = std::fabs(dw0[c]);
  for (std::size_t n = 0; n < N; ++n) {
    const double s = rstd[n];
    double sum = 0, sum_abs = 0;  // of g * xhat over the row
    for (std::size_t c = 0; c < C; ++c) {
      const double xhat = static_cast<double>(x[n * C + c]) * s, g = static_cast<double>(dout[n * C + c]) * w[c];
      sum += g * xhat;
      sum_abs += std::fabs(g * xhat);
      W[c] += std::fabs(dout[n * C + c] * xhat);
    }
    const double m = sum / static_cast<double>(C), A = sum_abs / static_cast<double>(C);
    const double mu = (row_gamma + 4 * kU32) * A;
    for (std::size_t c = 0; c < C; ++c) {
      const std::size_t i = n * C + c;
      const double xhat = static_cast<double>(x[i]) * s, g = std::fabs(static_cast<double>(dout[i]) * w[c]);
      const double t = std::fabs(xhat * m);
      const double delta = s * std::fabs(xhat) * mu + kU32 * (s * (7 * g + 9 * t) + 2 * std::fabs(dx0[i]));
      b.dx[i] = rmsnorm_after_rounding(delta, cpu_dx[i], r);
    }
  }
  const RmsNormBands bands = rmsnorm_backward_bands(N);
  const double gpu_chain = static_cast<double>((bands.rows + 7) / 8 + 7 + bands.count);
  const double dw_gamma = rmsnorm_gamma(static_cast<double>(N) + 1) + rmsnorm_gamma(gpu_chain);
  b.dweight.resize(C);
  for (std::size_t c = 0; c < C; ++c) b.dweight[c] = rmsnorm_after_rounding(dw_gamma * W[c], cpu_dw[c], r);
  return b;
}

}  // namespace trainmem::kernels::rmsnorm_test
