// How close N data-parallel ranks come to one process with the whole batch in 16 bits, where a
// test compares the two (suites/fsdp/test_fsdp_cli.cpp: the losses `trainmem train` prints). The
// sharding suites' parameter tests need no tolerance: they compare with one process that makes
// the ranks' own sums (common/tests/data_parallel_reference.h), bit for bit.
#pragma once
#include <cmath>

#include "common/model/precision.h"

namespace trainmem::testing_support {

// How far apart the two runs' losses may be, the same training up to 16-bit rounding, for a model
// whose logits stay below max_abs_logit in magnitude.
//
// The loss is the mean over the B*T positions of cross_entropy(z) = logsumexp(z) - z[target],
// whose gradient in the logits, softmax(z) - onehot(target), has an L1 norm of at most 2: a
// position's loss moves by at most 2 * max_j |dz_j| when its logits move by dz, and so does the
// mean. The logits are 16-bit numbers. In the two runs they are rounded from different fp32 sums
// (step 1: the same weights, but a rank's products have B rows where one process's have N*B, and
// OpenBLAS's blocking changes the sums' last bits; later steps: the 16-bit weights, within a few u
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

}  // namespace trainmem::testing_support
