// The CPU mixture-of-experts kernels (kernels/moe.h, kernels/cpu/moe.cpp), on fresh random inputs
// (seeded, never zero; moe_test_support.h), in every storage type (fp32, fp64, bf16, fp16), over
// the shapes of moe_test_support.h (k = 1, 2 of 8 experts, 4 of 60; prime token counts, odd widths):
//   (a) every output against a plain double evaluation of its formula (moe_test_support.h's
//       references), within count * u * size + the rounding to T, the counts derived in
//       moe_test_support.h's comment (u the compute type's unit roundoff; never fitted);
//   (b) in double, every backward against central differences of its forward
//       (kernels/tests/gradient_check.h): the router (forward and backward composed, with and
//       without renormalizing, with and without the load-balancing term), the combine (d expert
//       out, d weights, d shared out, d shared gate), the shared gate, the dispatch;
//   (c) the plan: counts summing to N*k, rows a permutation, grouped by expert then token exactly
//       as a stable sort orders them; an imbalanced routing; a token naming one expert twice; bad
//       expert ids refused;
//   (d) in place (dexpert_out over expert_out, dshared over shared_out; out over residual or
//       shared_out) equals out of place bit for bit;
//   (e) in 16 bits every output is the fp32 kernel's on the widened inputs, rounded once;
// and: extreme shared-gate logits give finite outputs; ties in the router go to the lower expert;
// the dispatchers (CPU: the cpu:: bits; meta: nothing); bad arguments refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <numeric>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/moe.h"
#include "kernels/tests/dtype_test_support.h"
#include "kernels/tests/gradient_check.h"
#include "kernels/tests/moe_test_support.h"

namespace trainmem::kernels {
namespace {

using namespace dtype_test;
using namespace moe_test;

template <typename T>
class MoeAllTypesCpu : public ::testing::Test {};
using MoeAllTypes = ::testing::Types<float, double, bf16, fp16>;
TYPED_TEST_SUITE(MoeAllTypesCpu, MoeAllTypes, DtypeNames);

template <typename T>
class MoeDtypeCpu : public ::testing::Test {};
TYPED_TEST_SUITE(MoeDtypeCpu, StorageTypes, DtypeNames);

// The widened values of v rounded to T, as the kernel stores them.
template <typename T>
std::vector<float> rounded_to(const std::vector<float>& v) {
  std::vector<float> r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = load(store<T>(v[i]));
  return r;
}

// ---------------------------------------------------------------------------------------- (a) router

TYPED_TEST(MoeAllTypesCpu, RouterForwardMatchesItsDefinition) {
  using T = TypeParam;
  constexpr double u = moe_compute_u<T>();
  for (const RouterCase& r : router_cases(100)) {
    SCOPED_TRACE(case_name(r, "tied logits"));
    const MoeShape& s = r.shape;
    const std::vector<T> logits = router_logits<T>(r);
    const RouterOutputs<T> got = cpu_router_forward(logits, s, r.renormalize);
    const RouterRef ref = router_reference(to_double(logits), s.N, s.E, s.k, r.renormalize);
    // The gaps (or exact ties) make the choice the same for every rounding: exactly equal.
    EXPECT_EQ(got.experts, ref.experts);
    EXPECT_TRUE(within_bounds("router probs", got.probs, ref.probs, [&](std::size_t i) {
      return moe_probs_count(ref.range[i / s.E], s.E, kMoeCpuExp) * u * ref.probs[i];
    }));
    EXPECT_TRUE(within_bounds("router weights", got.weights, ref.weights, [&](std::size_t i) {
      return moe_weights_count(ref.range[i / s.k], s.E, s.k, kMoeCpuExp, r.renormalize) * u * ref.weights[i] +
             moe_rounding<T>(ref.weights[i]);
    }));
  }
}

// All of a row's logits equal: every probability is 1/E bit for bit, and the top-k is experts
// 0, 1, ..., k-1 (the lower index wins a tie), each weighted 1/k (renormalized) or 1/E.
TYPED_TEST(MoeAllTypesCpu, RouterTiesGoToTheLowerExpert) {
  using T = TypeParam;
  const MoeShape s{3, 60, 4, 1};
  const std::vector<T> logits(s.N * s.E, store<T>(static_cast<compute_t<T>>(0.75)));
  for (const bool renormalize : {true, false}) {
    const RouterOutputs<T> got = cpu_router_forward(logits, s, renormalize);
    for (std::size_t n = 0; n < s.N; ++n)
      for (std::size_t j = 0; j < s.k; ++j) {
        EXPECT_EQ(got.experts[n * s.k + j], static_cast<std::int32_t>(j));
        const double want = renormalize ? 1.0 / double(s.k) : 1.0 / double(s.E);
        EXPECT_NEAR(got.weights[n * s.k + j], want, 4 * unit_roundoff<T>() * want + moe_rounding<T>(want));
      }
  }
}

TYPED_TEST(MoeAllTypesCpu, RouterBackwardMatchesItsDefinition) {
  using T = TypeParam;
  constexpr double u = moe_compute_u<T>();
  for (const RouterCase& r : router_cases(200)) {
    SCOPED_TRACE(case_name(r, "with aux"));
    const RouterBackwardCase<T> c = router_backward_case<T>(r);
    const std::vector<T> dlogits = cpu_router_backward<T>(c.dweights, c.aux, c.fwd, r.shape, r.renormalize);
    const double count = moe_router_backward_count(r.shape.E, r.shape.k);
    EXPECT_TRUE(within_bounds("router dlogits", dlogits, c.ref.value, [&](std::size_t i) {
      return count * u * c.ref.size[i] + moe_rounding<T>(c.ref.value[i]);
    }));
  }
}

// sums[e] = sum_n probs[n,e]: added in double in n order, rounded once to A. The kernel's and the
// reference's double sums are each within (N - 1) 2^-53 sum of the exact one (positive terms).
template <typename A>
void expect_prob_sums_match_their_definition() {
  const std::size_t N = 1031, E = 60;
  const std::vector<A> probs = random_values<A>(N * E, 300, 0.0, 1.0);
  std::vector<A> sums(E);
  cpu::moe_expert_prob_sums(sums.data(), probs.data(), N, E);
  std::vector<double> want(E, 0.0);
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t e = 0; e < E; ++e) want[e] += static_cast<double>(probs[n * E + e]);
  const double rounding = std::is_same_v<A, float> ? 0x1p-24 : 0.0;
  EXPECT_TRUE(within_bounds(std::string("expert prob sums (") + dtype_name<A>() + ")", sums, want,
                        [&](std::size_t e) { return (2.0 * N * 0x1p-53 + rounding) * want[e]; }));
}
TEST(MoeCpu, ExpertProbSumsMatchTheirDefinition) {
  expect_prob_sums_match_their_definition<float>();
  expect_prob_sums_match_their_definition<double>();
}

// ---------------------------------------------------------------------------------------- (c) plan

// The reference: the assignments i = n*k + j stably sorted by expert (so n, then j, within one);
// rows[i] = i's position in that order.
void plan_reference(const std::vector<std::int32_t>& experts, std::size_t E, std::vector<std::int32_t>& rows,
                    std::vector<std::int32_t>& counts) {
  std::vector<std::int32_t> order(experts.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) { return experts[a] < experts[b]; });
  rows.assign(experts.size(), -1);
  for (std::size_t r = 0; r < order.size(); ++r) rows[order[r]] = static_cast<std::int32_t>(r);
  counts.assign(E, 0);
  for (const std::int32_t e : experts) ++counts[e];
}

// The plan of `experts` checked: against the reference, and its properties one by one.
void expect_plan(const std::vector<std::int32_t>& experts, std::size_t N, std::size_t E, std::size_t k) {
  std::vector<std::int32_t> rows(N * k, -7), counts(E, -7);
  cpu::moe_plan(rows.data(), counts.data(), experts.data(), N, E, k);
  std::vector<std::int32_t> want_rows, want_counts;
  plan_reference(experts, E, want_rows, want_counts);
  EXPECT_EQ(rows, want_rows);
  EXPECT_EQ(counts, want_counts);
  EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), std::int64_t{0}), static_cast<std::int64_t>(N * k));
  std::vector<std::int32_t> sorted = rows, all(N * k);
  std::sort(sorted.begin(), sorted.end());
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(sorted, all) << "rows is not a permutation of 0..N*k-1";
  // Expert e's rows are [offset[e], offset[e] + counts[e]), in increasing assignment order.
  std::int64_t offset = 0;
  for (std::size_t e = 0; e < E; ++e) {
    std::int64_t next = offset;
    for (std::size_t i = 0; i < N * k; ++i)
      if (experts[i] == static_cast<std::int32_t>(e)) {
        EXPECT_EQ(rows[i], next++) << "assignment " << i;
      }
    offset += counts[e];
  }
}

TEST(MoeCpu, PlanGroupsAssignmentsByExpertThenToken) {
  std::uint64_t seed = 400;
  for (const MoeShape& s : kMoeShapes) {
    SCOPED_TRACE(shape_name(s));
    expect_plan(random_routing(s.N, s.E, s.k, ++seed), s.N, s.E, s.k);
  }
}

TEST(MoeCpu, PlanOfAnImbalancedRoutingAndOfARepeatedExpert) {
  const std::size_t N = 37, E = 8;
  // Every token to expert 5: the grouped rows are the tokens in order; the others get none.
  const std::vector<std::int32_t> one(N, 5);
  expect_plan(one, N, E, 1);
  std::vector<std::int32_t> rows(N), counts(E);
  cpu::moe_plan(rows.data(), counts.data(), one.data(), N, E, 1);
  for (std::size_t n = 0; n < N; ++n) EXPECT_EQ(rows[n], static_cast<std::int32_t>(n));
  EXPECT_EQ(counts, std::vector<std::int32_t>({0, 0, 0, 0, 0, static_cast<std::int32_t>(N), 0, 0}));
  // Every token to experts 7 and 2 (k = 2); and every token naming expert 3 twice (not from the
  // router, but still a permutation, ordered by n then j).
  std::vector<std::int32_t> two(2 * N), twice(2 * N, 3);
  for (std::size_t n = 0; n < N; ++n) {
    two[2 * n] = 7;
    two[2 * n + 1] = 2;
  }
  expect_plan(two, N, E, 2);
  expect_plan(twice, N, E, 2);
  // Nothing to plan: zero counts.
  std::vector<std::int32_t> zero_counts(E, -1);
  cpu::moe_plan(nullptr, zero_counts.data(), nullptr, 0, E, 2);
  EXPECT_EQ(zero_counts, std::vector<std::int32_t>(E, 0));
}

TEST(MoeCpu, PlanRefusesExpertIdsOutOfRange) {
  const std::size_t N = 5, E = 8, k = 2;
  for (const std::int32_t bad : {-1, 8, 1000}) {
    std::vector<std::int32_t> experts = random_routing(N, E, k, 450), rows(N * k), counts(E);
    experts[7] = bad;
    EXPECT_THROW(cpu::moe_plan(rows.data(), counts.data(), experts.data(), N, E, k), std::invalid_argument) << bad;
    EXPECT_THROW(moe_plan(kCpuStream, rows.data(), counts.data(), experts.data(), N, E, k), std::invalid_argument);
  }
}

// ---------------------------------------------------------------------------------------- (a) dispatch, combine

TYPED_TEST(MoeAllTypesCpu, DispatchCopiesRowsAndItsBackwardSumsThem) {
  using T = TypeParam;
  constexpr double u = moe_compute_u<T>();
  for (const MoeCase<T>& c : moe_cases<T>({false}, 500)) {
    SCOPED_TRACE(case_name(c));
    const MoeShape& s = c.shape;
    std::vector<T> want(s.N * s.k * s.C);
    for (std::size_t n = 0; n < s.N; ++n)
      for (std::size_t j = 0; j < s.k; ++j)
        for (std::size_t col = 0; col < s.C; ++col)
          want[static_cast<std::size_t>(c.rows[n * s.k + j]) * s.C + col] = c.x[n * s.C + col];
    EXPECT_TRUE(same_bits("dispatch", cpu_dispatch(c), want));

    const MoeRef ref = dispatch_backward_reference(to_double(c.dgrouped), c.rows, s.N, s.k, s.C);
    EXPECT_TRUE(within_bounds("dispatch backward", cpu_dispatch_backward(c), ref.value, [&](std::size_t i) {
      return double(s.k) * u * ref.size[i] + moe_rounding<T>(ref.value[i]);
    }));
  }
}

TYPED_TEST(MoeAllTypesCpu, CombineMatchesItsDefinition) {
  using T = TypeParam;
  constexpr double u = moe_compute_u<T>();
  for (const MoeCase<T>& c : moe_cases<T>({false, true}, 600)) {
    SCOPED_TRACE(case_name(c));
    const MoeShape& s = c.shape;
    const MoeRef ref = combine_reference(to_double(c.residual), to_double(c.expert_out), to_double(c.weights), c.rows,
                                         to_double(c.shared_out), to_double(c.shared_gate), s.N, s.k, s.C);
    const double count = moe_combine_count(s.k, c.shared, kMoeCpuExp);
    EXPECT_TRUE(within_bounds("combine", cpu_combine(c), ref.value, [&](std::size_t i) {
      return count * u * ref.size[i] + moe_rounding<T>(ref.value[i]);
    }));
  }
}

TYPED_TEST(MoeAllTypesCpu, CombineBackwardMatchesItsDefinition) {
  using T = TypeParam;
  constexpr double u = moe_compute_u<T>();
  const double sigmoid = moe_sigmoid_count(kMoeCpuExp);
  for (const MoeCase<T>& c : moe_cases<T>({false, true}, 700)) {
    SCOPED_TRACE(case_name(c));
    const MoeShape& s = c.shape;
    const CombineGrads<T> g = cpu_combine_backward(c);
    const CombineBackwardRef ref =
        combine_backward_reference(to_double(c.dout), to_double(c.expert_out), to_double(c.weights), c.rows,
                                   to_double(c.shared_out), to_double(c.shared_gate), s.N, s.k, s.C);
    auto bound = [&](const MoeRef& r, double count, bool rounded) {
      return [&r, count, rounded](std::size_t i) {
        return count * u * r.size[i] + (rounded ? moe_rounding<T>(r.value[i]) : 0.0);
      };
    };
    EXPECT_TRUE(within_bounds("combine dexpert_out", g.dexpert_out, ref.dexpert_out.value, bound(ref.dexpert_out, 2, true)));
    EXPECT_TRUE(within_bounds("combine dweights", g.dweights, ref.dweights.value,
                          bound(ref.dweights, double(s.C) + 1, false)));  // A: not rounded to T
    EXPECT_TRUE(within_bounds("combine dshared", g.dshared, ref.dshared.value, bound(ref.dshared, sigmoid + 2, true)));
    EXPECT_TRUE(within_bounds("combine dshared_gate", g.dshared_gate, ref.dshared_gate.value,
                          bound(ref.dshared_gate, 2 * sigmoid + double(s.C) + 4, true)));
  }
}

TYPED_TEST(MoeAllTypesCpu, SharedGateMatchesItsDefinition) {
  using T = TypeParam;
  constexpr double u = moe_compute_u<T>();
  for (const MoeCase<T>& c : moe_cases<T>({true}, 800)) {
    SCOPED_TRACE(case_name(c));
    const MoeShape& s = c.shape;
    const MoeRef fwd = shared_gate_forward_reference(to_double(c.x), to_double(c.gate_weight), s.N, s.C);
    EXPECT_TRUE(within_bounds("shared gate logits", cpu_shared_gate_forward(c), fwd.value, [&](std::size_t i) {
      return (double(s.C) + 1) * u * fwd.size[i] + moe_rounding<T>(fwd.value[i]);
    }));
    const SharedGateGrads<T> g = cpu_shared_gate_backward(c);
    const SharedGateBackwardRef ref =
        shared_gate_backward_reference(to_double(c.dx_start), to_double(c.dweight_start), to_double(c.dlogits),
                                       to_double(c.x), to_double(c.gate_weight), s.N, s.C);
    EXPECT_TRUE(within_bounds("shared gate dx", g.dx, ref.dx.value, [&](std::size_t i) {
      return 3 * u * ref.dx.size[i] + moe_rounding<T>(ref.dx.value[i]);
    }));
    EXPECT_TRUE(within_bounds("shared gate dweight", g.dweight, ref.dweight.value, [&](std::size_t i) {
      return (double(s.N) + 2) * u * ref.dweight.size[i] + moe_rounding<T>(ref.dweight.value[i]);
    }));
  }
}

// Shared gate logits far out on both sides: sigma(+-100), beyond fp32's exp range (|g| > 88),
// +-1e4 and T's largest finite value. Every output is finite and within the bounds of (a); where
// exp(-|g|) is subnormal or 0 (fp32 below e^-87, double below e^-708) s or 1 - s is off by less
// than 2^-126 absolute, times |dout| |shared_out| <= 1 per column: 2^-120 absolute covers it.
TYPED_TEST(MoeAllTypesCpu, ExtremeSharedGatesGiveFiniteOutputs) {
  using T = TypeParam;
  constexpr double u = moe_compute_u<T>();
  const std::vector<double> magnitudes = {0.5, 20, 88, 100, 1e4, largest_finite<T>()};
  const MoeShape s{2 * magnitudes.size(), 8, 2, 5};
  MoeCase<T> c = moe_case<T>(s, true, 900);
  for (std::size_t i = 0; i < magnitudes.size(); ++i) {
    c.shared_gate[2 * i] = store<T>(static_cast<compute_t<T>>(magnitudes[i]));
    c.shared_gate[2 * i + 1] = store<T>(static_cast<compute_t<T>>(-magnitudes[i]));
  }
  const std::vector<T> out = cpu_combine(c);
  const CombineGrads<T> g = cpu_combine_backward(c);
  for (const T v : out) EXPECT_TRUE(std::isfinite(static_cast<double>(load(v))));
  for (const T v : g.dshared) EXPECT_TRUE(std::isfinite(static_cast<double>(load(v))));
  for (const T v : g.dshared_gate) EXPECT_TRUE(std::isfinite(static_cast<double>(load(v))));
  const double flush = 0x1p-120, sigmoid = moe_sigmoid_count(kMoeCpuExp);
  const MoeRef ref = combine_reference(to_double(c.residual), to_double(c.expert_out), to_double(c.weights), c.rows,
                                       to_double(c.shared_out), to_double(c.shared_gate), s.N, s.k, s.C);
  EXPECT_TRUE(within_bounds("combine, extreme gates", out, ref.value, [&](std::size_t i) {
    return moe_combine_count(s.k, true, kMoeCpuExp) * u * ref.size[i] + moe_rounding<T>(ref.value[i]) + flush;
  }));
  const CombineBackwardRef gref =
      combine_backward_reference(to_double(c.dout), to_double(c.expert_out), to_double(c.weights), c.rows,
                                 to_double(c.shared_out), to_double(c.shared_gate), s.N, s.k, s.C);
  EXPECT_TRUE(within_bounds("dshared, extreme gates", g.dshared, gref.dshared.value, [&](std::size_t i) {
    return (sigmoid + 2) * u * gref.dshared.size[i] + moe_rounding<T>(gref.dshared.value[i]) + flush;
  }));
  EXPECT_TRUE(within_bounds("dshared_gate, extreme gates", g.dshared_gate, gref.dshared_gate.value, [&](std::size_t i) {
    return (2 * sigmoid + double(s.C) + 4) * u * gref.dshared_gate.size[i] +
           moe_rounding<T>(gref.dshared_gate.value[i]) + flush;
  }));
}

// ---------------------------------------------------------------------------------------- (d) in place

TYPED_TEST(MoeAllTypesCpu, InPlaceEqualsOutOfPlace) {
  using T = TypeParam;
  using A = compute_t<T>;
  std::uint64_t seed = 1000;
  for (const MoeShape& s : kMoeShapes) {
    SCOPED_TRACE(shape_name(s));
    const MoeCase<T> c = moe_case<T>(s, true, seed += 20);
    const CombineGrads<T> g = cpu_combine_backward(c);
    // The backward over the saved tensors: dexpert_out over expert_out, dshared over shared_out.
    std::vector<T> eo = c.expert_out, sh = c.shared_out, dgate(s.N);
    std::vector<A> dweights(s.N * s.k);
    cpu::moe_combine_backward(eo.data(), dweights.data(), sh.data(), dgate.data(), c.dout.data(), eo.data(),
                              c.weights.data(), c.rows.data(), sh.data(), c.shared_gate.data(), s.N, s.k, s.C);
    EXPECT_TRUE(same_bits("dexpert_out (in place over expert_out)", eo, g.dexpert_out));
    EXPECT_TRUE(same_bits("dshared (in place over shared_out)", sh, g.dshared));
    EXPECT_TRUE(same_bits("dweights (in place call)", dweights, g.dweights));
    EXPECT_TRUE(same_bits("dshared_gate (in place call)", dgate, g.dshared_gate));
    // The forward over its residual (the residual stream updated where it is) or over shared_out.
    const std::vector<T> out = cpu_combine(c);
    std::vector<T> over_residual = c.residual, over_shared = c.shared_out;
    cpu::moe_combine(over_residual.data(), over_residual.data(), c.expert_out.data(), c.weights.data(), c.rows.data(),
                     c.shared_out.data(), c.shared_gate.data(), s.N, s.k, s.C);
    cpu::moe_combine(over_shared.data(), c.residual.data(), c.expert_out.data(), c.weights.data(), c.rows.data(),
                     over_shared.data(), c.shared_gate.data(), s.N, s.k, s.C);
    EXPECT_TRUE(same_bits("combine (in place over residual)", over_residual, out));
    EXPECT_TRUE(same_bits("combine (in place over shared_out)", over_shared, out));
  }
}

// ---------------------------------------------------------------------------------------- (e) 16 bits

TYPED_TEST(MoeDtypeCpu, EachOutputIsTheFloatKernelsRounded) {
  using T = TypeParam;
  std::uint64_t seed = 1100;
  for (const MoeShape& s : kMoeShapes) {
    SCOPED_TRACE(shape_name(s));
    for (const bool renormalize : {true, false}) {
      const std::vector<T> logits = gapped_logits<T>(s.N, s.E, ++seed);
      const RouterOutputs<T> fwd = cpu_router_forward(logits, s, renormalize);
      const RouterOutputs<float> fwd32 = cpu_router_forward(widen(logits), s, renormalize);
      EXPECT_TRUE(same_bits("router probs", fwd.probs, fwd32.probs));
      EXPECT_EQ(fwd.experts, fwd32.experts);
      EXPECT_TRUE(same_bits("router weights", fwd.weights, rounded_to<T>(fwd32.weights)));
      const std::vector<float> dweights = random_values<float>(s.N * s.k, ++seed, -1.0, 1.0);
      const std::vector<float> aux = random_values<float>(s.E, ++seed, -0.5, 0.5);
      const RouterOutputs<float> same_inputs{fwd.probs, fwd.experts, fwd.weights};
      EXPECT_TRUE(same_bits("router dlogits", cpu_router_backward<T>(dweights, aux, fwd, s, renormalize),
                            narrow<T>(cpu_router_backward<float>(dweights, aux, same_inputs, s, renormalize))));
    }
    const MoeCase<T> c = moe_case<T>(s, true, seed += 20);
    const MoeCase<float> c32 = widen_case(c);
    EXPECT_TRUE(same_bits("dispatch", cpu_dispatch(c), narrow<T>(cpu_dispatch(c32))));
    EXPECT_TRUE(same_bits("dispatch backward", cpu_dispatch_backward(c), narrow<T>(cpu_dispatch_backward(c32))));
    EXPECT_TRUE(same_bits("combine", cpu_combine(c), narrow<T>(cpu_combine(c32))));
    const CombineGrads<T> g = cpu_combine_backward(c);
    const CombineGrads<float> g32 = cpu_combine_backward(c32);
    EXPECT_TRUE(same_bits("combine dexpert_out", g.dexpert_out, narrow<T>(g32.dexpert_out)));
    EXPECT_TRUE(same_bits("combine dweights", g.dweights, g32.dweights));
    EXPECT_TRUE(same_bits("combine dshared", g.dshared, narrow<T>(g32.dshared)));
    EXPECT_TRUE(same_bits("combine dshared_gate", g.dshared_gate, narrow<T>(g32.dshared_gate)));
    EXPECT_TRUE(same_bits("shared gate logits", cpu_shared_gate_forward(c), narrow<T>(cpu_shared_gate_forward(c32))));
    const SharedGateGrads<T> sg = cpu_shared_gate_backward(c);
    const SharedGateGrads<float> sg32 = cpu_shared_gate_backward(c32);
    EXPECT_TRUE(same_bits("shared gate dx", sg.dx, narrow<T>(sg32.dx)));
    EXPECT_TRUE(same_bits("shared gate dweight", sg.dweight, narrow<T>(sg32.dweight)));
  }
}

// ---------------------------------------------------------------------------------------- (b) gradients

// The double backward against central differences of the double forward (gradient_check.h:
// h = 1e-6). The losses are sums of a few dozen O(1) terms: the difference quotient is off by
// h^2/6 |loss'''| (~1e-12 here; the combine, dispatch and shared gate are linear or nearly so in
// each input) plus the loss's rounding, a few 2^-53 |loss| / h (~1e-9); 1e-6 of the largest
// gradient leaves a wide margin (as test_kernels_cpu.cpp's checks).
void moe_expect_gradient(std::vector<double>& x, const std::vector<double>& analytic,
                         const std::function<double()>& loss, const std::string& what) {
  const gradient_check::DerivativeCheck c = gradient_check::central_differences(x, analytic, loss);
  const double largest = std::max(c.largest, 1e-12);
  EXPECT_LT(c.worst / largest, 1e-6) << what << ": largest |finite difference - analytic| = " << c.worst
                                     << " (largest gradient " << c.largest << ")";
}

// loss = sum_i D[i] y[i]: a scalar whose gradient in y is D (the tests' D are random, never zero).
double weighted_sum(const std::vector<double>& D, const std::vector<double>& y) {
  EXPECT_EQ(D.size(), y.size());
  return std::inner_product(D.begin(), D.end(), y.begin(), 0.0);
}

// loss = sum_{n,j} G[n,j] weights[n,j] + sum_{n,e} aux[e] probs[n,e]: its gradient in the weights
// is G and in the probabilities aux, so the backward with dweights = G, aux_dprobs = aux is
// d loss / d logits. The logits' gaps keep the top-k the same at every +-h (checked).
TEST(MoeCpu, RouterBackwardIsTheDerivativeOfTheForward) {
  const std::vector<MoeShape> shapes = {{5, 8, 1, 1}, {6, 8, 2, 1}, {4, 60, 4, 1}};
  std::uint64_t seed = 1200;
  for (const MoeShape& s : shapes)
    for (const bool renormalize : {true, false})
      for (const bool with_aux : {true, false}) {
        SCOPED_TRACE(shape_name(s) + (renormalize ? " renormalized" : "") + (with_aux ? " with aux" : ""));
        std::vector<double> logits = gapped_logits<double>(s.N, s.E, ++seed);
        const std::vector<double> G = random_values<double>(s.N * s.k, ++seed, -1.0, 1.0);
        const std::vector<double> aux = with_aux ? random_values<double>(s.E, ++seed, -0.5, 0.5) : std::vector<double>();
        const RouterOutputs<double> base = cpu_router_forward(logits, s, renormalize);
        const std::vector<double> dlogits = cpu_router_backward<double>(G, aux, base, s, renormalize);
        bool same_choice = true;
        auto loss = [&] {
          const RouterOutputs<double> r = cpu_router_forward(logits, s, renormalize);
          same_choice = same_choice && r.experts == base.experts;
          double L = weighted_sum(G, r.weights);
          for (std::size_t i = 0; i < aux.size() * s.N; ++i) L += aux[i % s.E] * r.probs[i];
          return L;
        };
        moe_expect_gradient(logits, dlogits, loss, "router dlogits");
        EXPECT_TRUE(same_choice) << "the top-k changed under a step of h";
      }
}

// loss = sum_{n,c} D[n,c] out[n,c] (D = the case's dout): the backward with dout = D.
TEST(MoeCpu, CombineBackwardIsTheDerivativeOfTheForward) {
  const std::vector<MoeShape> shapes = {{7, 8, 2, 5}, {5, 60, 4, 3}, {6, 8, 1, 4}};
  std::uint64_t seed = 1300;
  for (const MoeShape& s : shapes)
    for (const bool shared : {true, false}) {
      SCOPED_TRACE(shape_name(s) + (shared ? " shared" : ""));
      MoeCase<double> c = moe_case<double>(s, shared, seed += 20);
      const CombineGrads<double> g = cpu_combine_backward(c);
      auto loss = [&] { return weighted_sum(c.dout, cpu_combine(c)); };
      moe_expect_gradient(c.expert_out, g.dexpert_out, loss, "combine dexpert_out");
      moe_expect_gradient(c.weights, g.dweights, loss, "combine dweights");
      if (shared) {
        moe_expect_gradient(c.shared_out, g.dshared, loss, "combine dshared");
        moe_expect_gradient(c.shared_gate, g.dshared_gate, loss, "combine dshared_gate");
      }
    }
}

// loss = sum_n DL[n] logits[n] (DL = the case's dlogits). The backward accumulates into dx_start
// and dweight_start (random, non-zero): what it added is compared.
TEST(MoeCpu, SharedGateBackwardIsTheDerivativeOfTheForward) {
  MoeCase<double> c = moe_case<double>({9, 8, 2, 13}, true, 1400);
  const SharedGateGrads<double> g = cpu_shared_gate_backward(c);
  std::vector<double> dx(g.dx.size()), dweight(g.dweight.size());
  for (std::size_t i = 0; i < dx.size(); ++i) dx[i] = g.dx[i] - c.dx_start[i];
  for (std::size_t i = 0; i < dweight.size(); ++i) dweight[i] = g.dweight[i] - c.dweight_start[i];
  auto loss = [&] { return weighted_sum(c.dlogits, cpu_shared_gate_forward(c)); };
  moe_expect_gradient(c.x, dx, loss, "shared gate dx");
  moe_expect_gradient(c.gate_weight, dweight, loss, "shared gate dweight");
}

// loss = sum DG * grouped, grouped = dispatch(x) (DG = the case's dgrouped).
TEST(MoeCpu, DispatchBackwardIsTheDerivativeOfTheForward) {
  for (const MoeShape& s : std::vector<MoeShape>{{7, 8, 2, 5}, {5, 60, 4, 3}}) {
    SCOPED_TRACE(shape_name(s));
    MoeCase<double> c = moe_case<double>(s, false, 1500);
    const std::vector<double> dx = cpu_dispatch_backward(c);
    auto loss = [&] { return weighted_sum(c.dgrouped, cpu_dispatch(c)); };
    moe_expect_gradient(c.x, dx, loss, "dispatch dx");
  }
}

// ---------------------------------------------------------------------------------------- dispatchers, refusals

// The dispatchers: the CPU backend gives the cpu:: bits; the meta backend touches nothing.
TEST(MoeCpu, DispatchersCallTheCpuKernelOrNothing) {
  const MoeShape s{37, 8, 2, 19};
  const MoeCase<float> c = moe_case<float>(s, true, 1600);
  const std::size_t N = s.N, E = s.E, k = s.k, C = s.C;
  const std::vector<float> logits = gapped_logits<float>(N, E, 1601);
  const RouterOutputs<float> fwd = cpu_router_forward(logits, s, true);
  RouterOutputs<float> got{std::vector<float>(N * E), std::vector<std::int32_t>(N * k), std::vector<float>(N * k)};
  moe_router_forward(kCpuStream, got.probs.data(), got.experts.data(), got.weights.data(), logits.data(), N, E, k, true);
  EXPECT_TRUE(same_bits("router probs (dispatcher)", got.probs, fwd.probs));
  EXPECT_EQ(got.experts, fwd.experts);
  EXPECT_TRUE(same_bits("router weights (dispatcher)", got.weights, fwd.weights));

  const std::vector<float> dweights = random_values<float>(N * k, 1602, -1.0, 1.0), aux(E, 0.25f);
  std::vector<float> dlogits(N * E);
  moe_router_backward(kCpuStream, dlogits.data(), dweights.data(), aux.data(), fwd.probs.data(), fwd.experts.data(), N,
                      E, k, true);
  EXPECT_TRUE(same_bits("router dlogits (dispatcher)", dlogits, cpu_router_backward<float>(dweights, aux, fwd, s, true)));

  std::vector<float> sums(E), want_sums(E);
  moe_expert_prob_sums(kCpuStream, sums.data(), fwd.probs.data(), N, E);
  cpu::moe_expert_prob_sums(want_sums.data(), fwd.probs.data(), N, E);
  EXPECT_TRUE(same_bits("expert prob sums (dispatcher)", sums, want_sums));

  std::vector<std::int32_t> rows(N * k), counts(E);
  moe_plan(kCpuStream, rows.data(), counts.data(), c.experts.data(), N, E, k);
  EXPECT_EQ(rows, c.rows);
  EXPECT_EQ(counts, c.counts);

  std::vector<float> grouped(N * k * C), dx(N * C), out(N * C);
  moe_dispatch(kCpuStream, grouped.data(), c.x.data(), c.rows.data(), N, k, C);
  EXPECT_TRUE(same_bits("dispatch (dispatcher)", grouped, cpu_dispatch(c)));
  moe_dispatch_backward(kCpuStream, dx.data(), c.dgrouped.data(), c.rows.data(), N, k, C);
  EXPECT_TRUE(same_bits("dispatch backward (dispatcher)", dx, cpu_dispatch_backward(c)));
  moe_combine(kCpuStream, out.data(), c.residual.data(), c.expert_out.data(), c.weights.data(), c.rows.data(),
              c.shared_out.data(), c.shared_gate.data(), N, k, C);
  EXPECT_TRUE(same_bits("combine (dispatcher)", out, cpu_combine(c)));

  const CombineGrads<float> g = cpu_combine_backward(c);
  CombineGrads<float> gd{std::vector<float>(N * k * C), std::vector<float>(N * k), std::vector<float>(N * C),
                         std::vector<float>(N)};
  moe_combine_backward(kCpuStream, gd.dexpert_out.data(), gd.dweights.data(), gd.dshared.data(), gd.dshared_gate.data(),
                       c.dout.data(), c.expert_out.data(), c.weights.data(), c.rows.data(), c.shared_out.data(),
                       c.shared_gate.data(), N, k, C);
  EXPECT_TRUE(same_bits("combine dexpert_out (dispatcher)", gd.dexpert_out, g.dexpert_out));
  EXPECT_TRUE(same_bits("combine dweights (dispatcher)", gd.dweights, g.dweights));
  EXPECT_TRUE(same_bits("combine dshared (dispatcher)", gd.dshared, g.dshared));
  EXPECT_TRUE(same_bits("combine dshared_gate (dispatcher)", gd.dshared_gate, g.dshared_gate));

  std::vector<float> gate_logits(N);
  moe_shared_gate_forward(kCpuStream, gate_logits.data(), c.x.data(), c.gate_weight.data(), N, C);
  EXPECT_TRUE(same_bits("shared gate logits (dispatcher)", gate_logits, cpu_shared_gate_forward(c)));
  SharedGateGrads<float> sg{c.dx_start, c.dweight_start};
  moe_shared_gate_backward(kCpuStream, sg.dx.data(), sg.dweight.data(), c.dlogits.data(), c.x.data(),
                           c.gate_weight.data(), N, C);
  const SharedGateGrads<float> want_sg = cpu_shared_gate_backward(c);
  EXPECT_TRUE(same_bits("shared gate dx (dispatcher)", sg.dx, want_sg.dx));
  EXPECT_TRUE(same_bits("shared gate dweight (dispatcher)", sg.dweight, want_sg.dweight));

  const Stream meta{Backend::meta, nullptr};
  EXPECT_NO_THROW(moe_router_forward(meta, nullptr, nullptr, nullptr, nullptr, N, E, k, true));
  EXPECT_NO_THROW(moe_router_backward(meta, nullptr, nullptr, nullptr, nullptr, nullptr, N, E, k, false));
  EXPECT_NO_THROW(moe_expert_prob_sums(meta, nullptr, nullptr, N, E));
  EXPECT_NO_THROW(moe_plan(meta, nullptr, nullptr, nullptr, N, E, k));
  EXPECT_NO_THROW(moe_dispatch(meta, nullptr, nullptr, nullptr, N, k, C));
  EXPECT_NO_THROW(moe_dispatch_backward(meta, nullptr, nullptr, nullptr, N, k, C));
  EXPECT_NO_THROW(moe_combine(meta, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, N, k, C));
  EXPECT_NO_THROW(moe_combine_backward(meta, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                       nullptr, nullptr, N, k, C));
  EXPECT_NO_THROW(moe_shared_gate_forward(meta, nullptr, nullptr, nullptr, N, C));
  EXPECT_NO_THROW(moe_shared_gate_backward(meta, nullptr, nullptr, nullptr, nullptr, nullptr, N, C));
}

// A top-k outside 1..E, a half-given shared expert, more grouped rows than int32 indexes: refused
// on every backend (the meta one included), before anything is read.
TEST(MoeCpu, RefusesBadArguments) {
  const Stream meta{Backend::meta, nullptr};
  float probs = 0, weights = 0, logits = 0;
  std::int32_t experts = 0;
  for (const std::size_t k : {std::size_t{0}, std::size_t{9}}) {
    EXPECT_THROW(cpu::moe_router_forward(&probs, &experts, &weights, &logits, 1, 8, k, true), std::invalid_argument);
    EXPECT_THROW(moe_router_forward(meta, nullptr, nullptr, nullptr, nullptr, 1, 8, k, true), std::invalid_argument);
    EXPECT_THROW(moe_router_backward(meta, nullptr, nullptr, nullptr, nullptr, nullptr, 1, 8, k, true),
                 std::invalid_argument);
  }
  const float one = 1;
  EXPECT_THROW(moe_combine(meta, nullptr, nullptr, nullptr, nullptr, nullptr, &one, nullptr, 1, 1, 1),
               std::invalid_argument);
  EXPECT_THROW(moe_combine(meta, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, &one, 1, 1, 1),
               std::invalid_argument);
  float d = 0;
  EXPECT_THROW(moe_combine_backward(meta, nullptr, nullptr, nullptr, &d, nullptr, nullptr, nullptr, nullptr, &one,
                                    &one, 1, 1, 1),
               std::invalid_argument);  // no dshared
  EXPECT_THROW(moe_combine_backward(meta, nullptr, nullptr, &d, &d, nullptr, nullptr, nullptr, nullptr, nullptr,
                                    nullptr, 1, 1, 1),
               std::invalid_argument);  // gradients of a shared expert that is not there
  std::vector<float> out(1), residual(1, 1.0f), expert_out(1, 1.0f), w(1, 1.0f);
  const std::int32_t row = 0;
  EXPECT_THROW(cpu::moe_combine(out.data(), residual.data(), expert_out.data(), w.data(), &row, &one,
                                static_cast<const float*>(nullptr), 1, 1, 1),
               std::invalid_argument);
  EXPECT_THROW(moe_plan(meta, nullptr, nullptr, nullptr, std::size_t{1} << 30, 8, 4), std::invalid_argument);
}

}  // namespace
}  // namespace trainmem::kernels
