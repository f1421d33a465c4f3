// How close N data-parallel ranks come to one process with the whole batch in 16 bits: the
// tolerance of the sharding suites' equality tests (suites/zero, suites/fsdp) for bf16 and fp16,
// applied to the fp32 master weights after a few AdamW steps.
//
// Where the two runs differ. The per-row forward and backward are the same bits (the ranks' rows
// are rows of the one process's batch, the loss factor 1/(N*B*T) is the same float for N a power
// of two). A weight gradient is not: one process sums all N*B rows in fp32 and rounds the sum once
// to 16 bits; a rank rounds its own rows' sum, and the reduction rounds the sum of the N rounded
// sums once more. Each rounding is at most half a unit in the last place, u = 2^-11 relative in
// fp16 and 2^-8 in bf16. After the first step the 16-bit weights are the masters rounded, and two
// masters a hair apart may round to neighbouring values (one ulp, 2u), so later forwards differ by
// that too. Together: a gradient's relative error of a few u, say 4u (two roundings on each side).
//
// What that does to the masters. AdamW's step is lr * m^/(sqrt(v^) + eps): scale-free in the
// gradient, so a gradient's relative error e moves a step by about lr * e, except where the
// gradient is itself rounding noise (the ranks' partial sums nearly cancel): there the step's
// sign is noise and the two runs may move that element by up to lr each, 2 lr apart. So, after
// `steps` steps:
//   close   = steps * lr * 2 * 4u       most elements: twice the estimate above
//   at most far_fraction = 2 % of the elements further than `close` (the noise gradients;
//           measured at N = 2 and 4, lr 1e-3, 3 steps: ZeRO's test model at most 0.8 %, FSDP's
//           1.1 % in fp16 and 1.4 % in bf16; the largest difference 2.0e-3)
//   none further than 2 * lr * steps    (the most two AdamW runs can drift apart)
// Every ZeRO stage and FSDP mode shows plain data parallelism's differences, to the bit: they
// come from data parallelism in 16 bits, not from sharding.
// A lost micro-batch, a wrong slice or a reduced gradient that is not the mean moves most elements
// by about lr: far beyond `close` for far more than 2 % of them.
#pragma once
#include <cmath>
#include <cstddef>
#include <vector>

#include "common/model/precision.h"

namespace trainmem::testing_support {

struct DataParallelTolerance {
  double close = 0;          // most elements within this
  double far_fraction = 0;   // the fraction allowed beyond it
  double bound = 0;          // no element beyond this
};

inline DataParallelTolerance sixteen_bit_tolerance(Precision precision, double lr, int steps) {
  const double u = precision == Precision::fp16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
  return {steps * lr * 2 * 4 * u, 0.02, 2 * lr * steps};
}

// How far apart the two runs' losses may be, the same training up to 16-bit rounding, for a model
// whose logits stay below max_abs_logit in magnitude.
//
// The loss is the mean over the B*T positions of cross_entropy(z) = logsumexp(z) - z[target],
// whose gradient in the logits, softmax(z) - onehot(target), has an L1 norm of at most 2: a
// position's loss moves by at most 2 * max_j |dz_j| when its logits move by dz, and so does the
// mean. The logits are 16-bit numbers. In the two runs they are rounded from different fp32 sums
// (step 1: the same weights, but a rank's products have B rows where one process's have N*B, and
// OpenBLAS's blocking changes the sums' last bits; later steps: the masters above, within a few u
// of each other for most elements). We budget each logit one unit in the last place of the
// largest logit apart: a 16-bit number below 2^e has places of at most 2^(e-1) * 2u = 2^e u. So
//   |loss difference| <= 2 * 2^e * u        (max_abs_logit <= 2^e)
// A worst case: every logit one place apart, each in the direction that adds up. Measured (tiny
// model, fp16, 4 steps, 2 and 4 ranks, every sharding mode): at most 1.1e-4, since the positions'
// differences have both signs and mostly cancel in the mean. The bound is not a test of the
// mean itself: one rank's loss instead of the mean differed from it by 4.5e-3 at step 1.
inline double sixteen_bit_loss_tolerance(Precision precision, double max_abs_logit) {
  const double u = precision == Precision::fp16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
  const double place = std::ldexp(1.0, static_cast<int>(std::ceil(std::log2(max_abs_logit))));  // 2^e
  return 2 * place * u;
}

// How many elements are further than `close`, and the largest difference.
struct Differences {
  std::size_t beyond_close = 0;
  double largest = 0;
};

inline Differences differences(const std::vector<float>& got, const std::vector<float>& want, double close) {
  Differences d;
  for (std::size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i]));
    d.beyond_close += !(diff <= close);  // NaN counts as beyond
    if (!(diff <= d.largest)) d.largest = diff;
  }
  return d;
}

}  // namespace trainmem::testing_support
