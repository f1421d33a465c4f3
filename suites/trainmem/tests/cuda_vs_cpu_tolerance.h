// How far two correct implementations of the same training steps may drift apart: the CUDA
// backend against the CPU's (test_training_cuda.cpp), and the CPU's 16-bit run against its fp32
// run (test_cuda_vs_cpu_tolerance.cpp, which checks the model below on real runs). Derived from
// the rounding, never fitted to a measurement.
//
// Both backends compute the same formulas, with the same storage type at the same points (every
// kernel reads and writes the storage type and computes in fp32 inside, kernels/dtype.h). They
// differ only in rounding:
//
//  (a) fp32 sums in another order (cuBLAS's blocking, the CPU's BLAS, warp reductions). A sum of
//      n terms is off by at most lambda sqrt(n) u32 times the sum of the terms' magnitudes
//      (probabilistic rounding-error analysis: Higham & Mary, SIAM J. Sci. Comput. 41(5), 2019,
//      Theorem 2.4, with probability at least 1 - 2 exp(-lambda^2 / 2)); with the random weights
//      of a young model the terms have random signs, and their magnitudes sum to about sqrt(n)
//      times the sum itself. Two implementations: 2 lambda n u32, relative to the result, for the
//      longest reduction n of a step: max(B T, 4C, T, V) (a weight gradient sums B T rows).
//  (b) In 16 bits, each stored element is rounded to nearest: u = 2^-8 (bf16) or 2^-11 (fp16)
//      relative. Fed values that differ slightly by (a), two backends can round one element to
//      neighbouring 16-bit values: 2u apart. (The CPU's 16-bit run against its fp32 run: u.)
//
// So one stored stage differs, relative to its elements, by at most
//     e = 2u + 2 lambda n u32          (u = 0 in fp32).
// A step's result passes through R such stages. To first order the stages' differences add, each
// carried forward with a relative condition number of about 1 (every branch starts with a
// layernorm, which puts its input back at unit scale, and a young model's stages are near
// linear), and, being independent rounding errors, they add in quadrature (Higham & Mary again):
//     eps(R) = lambda sqrt(R) e.
// The stages, per layer 12 forward (ln1, qkv, scores, probabilities, attention output, its
// projection, the residual, ln2, fc, GELU, the MLP projection, the residual; flash and cuDNN
// round P inside instead of storing scores and probabilities, counted by the same two) and 12
// backward (their gradients); the head 3 forward (embedding, lnf, logits) and 4 backward (logits,
// lnf, the two gradients of the tied wte): R_f = 12 L + 3, R_b = 12 L + 4.
//
// Compared per step k = 1, 2, ...:
//   gradients: each element's relative difference is at most eps(R_f + R_b), so the gradient
//     vector's ||g' - g|| <= eps ||g||, and the norm's | ||g'|| - ||g|| | <= ||g' - g|| too, plus
//     the norm's own fp32 sum of P squares (all positive: lambda sqrt(P) u32);
//   the loss: each position's cross-entropy has a gradient of l1 norm <= 2 with respect to its
//     logits, so |dL| <= 2 max|dz| <= 2 eps(R_f) Z, with Z the bound on |logit| that
//     training_trace.h computes from the step's weights;
//   later steps: step k starts from weights that differ by the earlier updates' differences; to
//     first order each step adds its own rounding to the ones it inherits: k eps. AdamW moves an
//     element by at most a = lr max(1, (1 - beta1) / sqrt(1 - beta2)) (Kingma & Ba 2015, 2.1)
//     and its first steps are sign-like, so an element whose gradient is smaller than its
//     difference may move the other way: to first order that changes the next losses by at most
//     2 a sum_e |dg_e| <= 2 a sqrt(P) ||dg|| <= 2 a sqrt(P) eps_g G per earlier step (G the step's
//     gradient norm).
// lambda = 5: each bound fails with probability below 2 exp(-12.5) = 7.5e-6 under the model.
//
// These are bounds, not estimates, and loose ones: on the CPU (16-bit against fp32, the test
// beside this file) the gradients differ by 0.04-0.3 % against bounds of 2.4-16 %, the losses by
// at most 6e-4 against 0.05 and more. bf16's (u = 2^-8) is the loosest, its cases catch gross
// errors (a wrong kernel); fp16's and fp32's, 6 to 50 times tighter, smaller ones.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <sstream>
#include <vector>

#include "common/model/model_config.h"
#include "common/model/precision.h"
#include "kernels/adamw.h"
#include "suites/trainmem/tests/training_trace.h"

namespace trainmem::testing_support {

// Which runs are compared: two that both round to 16 bits (CUDA against CPU), or a 16-bit run
// against an fp32 one (only one of them rounds).
enum class Rounding { both_sides, one_side };

class CudaVsCpuTolerance {
 public:
  static constexpr double kLambda = 5;
  static constexpr double kU32 = 0x1p-24;

  CudaVsCpuTolerance(const ModelConfig& model, std::size_t batch, Precision precision, const kernels::AdamWHyper& adam,
                     Rounding rounding = Rounding::both_sides)
      : parameters_(static_cast<double>(model.num_parameters())), same_precision_(rounding == Rounding::both_sides) {
    const double n = static_cast<double>(std::max({batch * model.seq, model.mlp_dim(), model.seq, model.vocab}));
    const double u16 = precision == Precision::bf16 ? 0x1p-8 : precision == Precision::fp16 ? 0x1p-11 : 0;
    stage_ = (rounding == Rounding::both_sides ? 2 : 1) * u16 + 2 * kLambda * n * kU32;
    const double L = static_cast<double>(model.layers);
    // A Llama layer (llama.h) stores 14 forward stages (attn_norm, qkv, RoPE, scores, probabilities,
    // attention output, projection, residual, mlp_norm, gate, up, SwiGLU, down, residual) and 15
    // backward (their gradients and the sum of the MLP input's two); its head is counted as GPT's.
    const bool llama = model.arch == Arch::llama;
    forward_stages_ = (llama ? 14 : 12) * L + 3;
    backward_stages_ = (llama ? 15 : 12) * L + 4;
    // A 16-bit run against an fp32 one: the 16-bit run's initial weights are rounded too.
    if (rounding == Rounding::one_side && u16 > 0) forward_stages_ += 1;
    update_ = adam.lr * std::max(1.0, (1 - static_cast<double>(adam.beta1)) / std::sqrt(1 - static_cast<double>(adam.beta2)));
  }

  // Both runs in the same precision: the same loss scales too (fp16's dynamic scaler).
  bool same_precision() const { return same_precision_; }
  double stage() const { return stage_; }
  double forward() const { return kLambda * std::sqrt(forward_stages_) * stage_; }
  double gradient_at_first_step() const { return kLambda * std::sqrt(forward_stages_ + backward_stages_) * stage_; }

  // Relative: ||g' - g|| <= gradients(k) ||g||.
  double gradients(long step) const { return static_cast<double>(step) * gradient_at_first_step(); }
  // Relative, of the gradient norm.
  double grad_norm(long step) const { return gradients(step) + kLambda * std::sqrt(parameters_) * kU32; }
  // Absolute, of the loss at step k (1-based), given the reference run's steps before it.
  double loss(long step, const std::vector<TracedStep>& reference) const {
    const auto& now = reference[static_cast<std::size_t>(step - 1)];
    double tol = 2 * static_cast<double>(step) * forward() * now.logit_bound;
    for (long j = 1; j < step; ++j)
      tol += 2 * update_ * std::sqrt(parameters_) * gradients(j) * reference[static_cast<std::size_t>(j - 1)].grad_norm;
    return tol;
  }

 private:
  double parameters_;
  bool same_precision_;
  double stage_ = 0;
  double forward_stages_ = 0, backward_stages_ = 0;
  double update_ = 0;
};

// Step by step: the same steps skipped (and loss scales, in the same precision); the loss, the gradient norm and the
// gradient vector within the tolerance. On failure, every step's figures beside their bounds.
inline ::testing::AssertionResult traces_agree(const std::vector<TracedStep>& got, const std::vector<TracedStep>& reference,
                                               const CudaVsCpuTolerance& tol) {
  if (got.size() != reference.size())
    return ::testing::AssertionFailure() << got.size() << " steps against " << reference.size();
  bool ok = true;
  std::ostringstream report;
  report << "per stage e = " << tol.stage() << ", step 1 gradients eps = " << tol.gradient_at_first_step();
  for (std::size_t i = 0; i < got.size(); ++i) {
    const long k = static_cast<long>(i) + 1;
    const TracedStep& a = got[i];
    const TracedStep& b = reference[i];
    const double dloss = std::fabs(a.loss - b.loss);
    const double dnorm = std::fabs(a.grad_norm - b.grad_norm) / b.grad_norm;
    const double dgrad = a.gradients.size() == b.gradients.size() ? relative_difference(a.gradients, b.gradients) : INFINITY;
    // (written so that NaN fails)
    const bool same_scale = !tol.same_precision() || a.loss_scale == b.loss_scale;
    const bool step_ok = a.skipped == b.skipped && same_scale && dloss <= tol.loss(k, reference) &&
                         dnorm <= tol.grad_norm(k) && dgrad <= tol.gradients(k);
    ok = ok && step_ok;
    report << "\n  step " << k << (step_ok ? "  " : " X") << " loss " << a.loss << " vs " << b.loss << " |diff| "
           << dloss << " <= " << tol.loss(k, reference) << "; grad norm " << a.grad_norm << " vs " << b.grad_norm
           << " rel " << dnorm << " <= " << tol.grad_norm(k) << "; gradients rel " << dgrad << " <= " << tol.gradients(k)
           << "; loss scale " << a.loss_scale << " vs " << b.loss_scale << (a.skipped != b.skipped ? " SKIPPED ON ONE SIDE" : "");
  }
  return (ok ? ::testing::AssertionSuccess() : ::testing::AssertionFailure()) << report.str();
}

}  // namespace trainmem::testing_support
