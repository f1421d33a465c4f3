// The CUDA mixture-of-experts kernels (kernels/cuda/moe.cu) against the CPU reference
// (kernels/cpu/moe.cpp, checked by test_moe_cpu.cpp) in each storage type (fp32, bf16, fp16), on
// the inputs and shapes of moe_test_support.h, with poisoned outputs (an element never written
// reads as NaN and fails; an index as -1) on a non-default stream, 16-bit inputs only 2-byte
// aligned. The plan and the dispatch must equal the CPU's exactly (integers; a copy), the router's
// choice of experts too (the logits' gaps or exact ties decide it for any rounding); in place
// equals the GPU's own out-of-place bits. Skips, saying why, where no GPU answers.
//
// Tolerance. moe_test_support.h derives, for each output, a count such that a kernel's fp32 value
// is within count * u * size of the exact one (u = 2^-24; size = the formula on absolute values,
// computed in double from the same inputs); the GPU's counts differ only where it calls expf
// (2 ulps instead of the CPU's 1: kMoeGpuExp). Both values are then rounded once to T (u(T)
// relative, up to 2^-25 absolute for fp16 subnormals; nothing for fp32). With B = (count_cpu +
// count_gpu) u size and x the exact value, |gpu - cpu| <= B + u(T) (|gpu| + |cpu|) and
// |x| <= (|cpu| + B) / (1 - u(T)), so
//   |gpu - cpu| <= 1.01 B + 2.01 u(T) |cpu| (+ 2 * 2^-25 in fp16)       (u(T) <= 2^-8)
// The probability sums add in double on both sides (within 2 N 2^-53 sum of each other) and
// round once to fp32.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/moe.h"
#include "kernels/tests/cuda_test_support.cuh"
#include "kernels/tests/moe_test_support.h"

namespace trainmem::kernels {
namespace {

using namespace cuda_test;  // PoisonedBuffer, DeviceBuffer, TestStream, finish and the names they use
using namespace moe_test;   // the inputs, the CPU kernels' runs, the references and the counts

template <typename T>
class MoeCuda : public ::testing::Test {};
using MoeCudaTypes = ::testing::Types<float, bf16, fp16>;
TYPED_TEST_SUITE(MoeCuda, MoeCudaTypes, dtype_test::DtypeNames);

class MoeCudaPlain : public GpuTest {};

constexpr double kMoeU = 0x1p-24;

// The file comment's bound on |gpu - cpu| for one element: B = count * u * size, where count is
// the CPU's and the GPU's counts together; `rounded`: the output is stored in T (else fp32).
template <typename T>
double gpu_cpu_allowed(double count, double size, double cpu_value, bool rounded = true) {
  const double B = count * kMoeU * size;
  if (!rounded || std::is_same_v<T, float>) return 1.01 * B;
  return 1.01 * B + 2.01 * unit_roundoff<T>() * std::fabs(cpu_value) + (std::is_same_v<T, fp16> ? 2 * 0x1p-25 : 0.0);
}

// Bit for bit (every value equal; NaN never is).
template <typename V>
::testing::AssertionResult same_values(const std::string& what, const std::vector<V>& gpu, const std::vector<V>& cpu) {
  return within_bounds(what, gpu, dtype_test::to_double(cpu), [](std::size_t) { return 0.0; });
}

template <typename T>
std::vector<double> as_double(const std::vector<T>& v) {
  return dtype_test::to_double(v);
}

// ---------------------------------------------------------------------------------------- GPU runs

template <typename T>
RouterOutputs<T> gpu_router_forward(void* stream, const std::vector<T>& logits, const MoeShape& s, bool renormalize) {
  const DeviceBuffer<T> d_logits(logits, 1);  // offset 1: a 16-bit pointer only 2-byte aligned
  PoisonedBuffer<float> probs(s.N * s.E), weights(s.N * s.k);
  PoisonedBuffer<std::int32_t> experts(s.N * s.k);
  cuda::moe_router_forward<T>(stream, probs.get(), experts.get(), weights.get(), d_logits.get(), s.N, s.E, s.k,
                              renormalize);
  finish();
  return {probs.download(), experts.download(), weights.download()};
}

template <typename T>
std::vector<T> gpu_router_backward(void* stream, const std::vector<float>& dweights, const std::vector<float>& aux,
                                   const RouterOutputs<T>& fwd, const MoeShape& s, bool renormalize) {
  const DeviceBuffer<float> d_dweights(dweights), d_aux(aux), d_probs(fwd.probs);
  const DeviceBuffer<std::int32_t> d_experts(fwd.experts);
  PoisonedBuffer<T> dlogits(s.N * s.E, 1);
  cuda::moe_router_backward<T>(stream, dlogits.get(), d_dweights.get(), aux.empty() ? nullptr : d_aux.get(),
                               d_probs.get(), d_experts.get(), s.N, s.E, s.k, renormalize);
  finish();
  return dlogits.download();
}

struct GpuPlan {
  std::vector<std::int32_t> rows, counts;
};
GpuPlan gpu_plan(void* stream, const std::vector<std::int32_t>& experts, std::size_t N, std::size_t E, std::size_t k) {
  const DeviceBuffer<std::int32_t> d_experts(experts);
  PoisonedBuffer<std::int32_t> rows(N * k), counts(E);
  cuda::moe_plan(stream, rows.get(), counts.get(), d_experts.get(), N, E, k);
  finish();
  return {rows.download(), counts.download()};
}

// A case's tensors on the GPU (16-bit ones 2-byte aligned).
template <typename T>
struct DeviceCase {
  explicit DeviceCase(const MoeCase<T>& c)
      : rows(c.rows), weights(c.weights), x(c.x, 1), residual(c.residual, 1), expert_out(c.expert_out, 1),
        shared_out(c.shared_out, 1), shared_gate(c.shared_gate, 1), dout(c.dout, 1), gate_weight(c.gate_weight, 1),
        dlogits(c.dlogits, 1), dgrouped(c.dgrouped, 1), shared(c.shared) {}
  DeviceBuffer<std::int32_t> rows;
  DeviceBuffer<float> weights;
  DeviceBuffer<T> x, residual, expert_out, shared_out, shared_gate, dout, gate_weight, dlogits, dgrouped;
  bool shared;
  const T* shared_out_or_null() const { return shared ? shared_out.get() : nullptr; }
  const T* shared_gate_or_null() const { return shared ? shared_gate.get() : nullptr; }
};

template <typename T>
std::vector<T> gpu_combine(void* stream, const MoeCase<T>& c, const DeviceCase<T>& d) {
  const MoeShape& s = c.shape;
  PoisonedBuffer<T> out(s.N * s.C, 1);
  cuda::moe_combine<T>(stream, out.get(), d.residual.get(), d.expert_out.get(), d.weights.get(), d.rows.get(),
                       d.shared_out_or_null(), d.shared_gate_or_null(), s.N, s.k, s.C);
  finish();
  return out.download();
}

template <typename T>
CombineGrads<T> gpu_combine_backward(void* stream, const MoeCase<T>& c, const DeviceCase<T>& d) {
  const MoeShape& s = c.shape;
  PoisonedBuffer<T> dexpert_out(s.N * s.k * s.C, 1), dshared(c.shared ? s.N * s.C : 0, 1),
      dshared_gate(c.shared ? s.N : 0, 1);
  PoisonedBuffer<float> dweights(s.N * s.k);
  cuda::moe_combine_backward<T>(stream, dexpert_out.get(), dweights.get(), c.shared ? dshared.get() : nullptr,
                                c.shared ? dshared_gate.get() : nullptr, d.dout.get(), d.expert_out.get(),
                                d.weights.get(), d.rows.get(), d.shared_out_or_null(), d.shared_gate_or_null(), s.N,
                                s.k, s.C);
  finish();
  return {dexpert_out.download(), dweights.download(), dshared.download(), dshared_gate.download()};
}

// ---------------------------------------------------------------------------------------- router

TYPED_TEST(MoeCuda, RouterForwardMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  TestStream stream;
  for (const RouterCase& r : router_cases(2000)) {
    SCOPED_TRACE(case_name(r, "tied logits"));
    const MoeShape& s = r.shape;
    const std::vector<T> logits = router_logits<T>(r);
    const RouterOutputs<T> cpu = cpu_router_forward(logits, s, r.renormalize);
    const RouterOutputs<T> gpu = gpu_router_forward(stream.get(), logits, s, r.renormalize);
    EXPECT_EQ(gpu.experts, cpu.experts);
    const RouterRef ref = router_reference(as_double(logits), s.N, s.E, s.k, r.renormalize);
    EXPECT_TRUE(within_bounds("router probs", gpu.probs, as_double(cpu.probs), [&](std::size_t i) {
      const double Y = ref.range[i / s.E];
      const double count = moe_probs_count(Y, s.E, kMoeCpuExp) + moe_probs_count(Y, s.E, kMoeGpuExp);
      return gpu_cpu_allowed<T>(count, ref.probs[i], cpu.probs[i], false);
    }));
    EXPECT_TRUE(within_bounds("router weights", gpu.weights, as_double(cpu.weights), [&](std::size_t i) {
      const double Y = ref.range[i / s.k];
      const double count = moe_weights_count(Y, s.E, s.k, kMoeCpuExp, r.renormalize) +
                           moe_weights_count(Y, s.E, s.k, kMoeGpuExp, r.renormalize);
      return gpu_cpu_allowed<T>(count, ref.weights[i], cpu.weights[i]);
    }));
  }
}

TYPED_TEST(MoeCuda, RouterBackwardMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  TestStream stream;
  for (const RouterCase& r : router_cases(2100)) {
    SCOPED_TRACE(case_name(r, "with aux"));
    const RouterBackwardCase<T> c = router_backward_case<T>(r);
    const std::vector<T> cpu = cpu_router_backward<T>(c.dweights, c.aux, c.fwd, r.shape, r.renormalize);
    const std::vector<T> gpu = gpu_router_backward<T>(stream.get(), c.dweights, c.aux, c.fwd, r.shape, r.renormalize);
    const double count = 2 * moe_router_backward_count(r.shape.E, r.shape.k);
    const std::vector<double> cpu_d = as_double(cpu);
    EXPECT_TRUE(within_bounds("router dlogits", gpu, cpu_d, [&](std::size_t i) {
      return gpu_cpu_allowed<T>(count, c.ref.size[i], cpu_d[i]);
    }));
  }
}

TEST_F(MoeCudaPlain, ExpertProbSumsMatchTheCpu) {
  for (const MoeShape& s : kMoeShapes) {
    SCOPED_TRACE(shape_name(s));
    const std::vector<float> probs = random_values<float>(s.N * s.E, 2200 + s.N, 0.0, 1.0);
    std::vector<float> cpu(s.E);
    cpu::moe_expert_prob_sums(cpu.data(), probs.data(), s.N, s.E);
    const DeviceBuffer<float> d_probs(probs);
    PoisonedBuffer<float> sums(s.E);
    cuda::moe_expert_prob_sums(stream(), sums.get(), d_probs.get(), s.N, s.E);
    finish();
    const std::vector<double> cpu_d = as_double(cpu);
    EXPECT_TRUE(within_bounds("expert prob sums", sums.download(), cpu_d, [&](std::size_t e) {
      return (4.0 * s.N * 0x1p-53 + 2.01 * kMoeU) * cpu_d[e];
    }));
  }
}

// ---------------------------------------------------------------------------------------- plan

TEST_F(MoeCudaPlain, PlanEqualsTheCpu) {
  struct Routing {
    std::string name;
    std::vector<std::int32_t> experts;
    std::size_t N, E, k;
  };
  std::vector<Routing> routings;
  std::uint64_t seed = 2300;
  for (const MoeShape& s : kMoeShapes)
    routings.push_back({shape_name(s), random_routing(s.N, s.E, s.k, ++seed), s.N, s.E, s.k});
  // Many chunks of 256 assignments per block, and an expert count not a power of two.
  routings.push_back({"N=5003 E=60 k=4", random_routing(5003, 60, 4, ++seed), 5003, 60, 4});
  // Every token to one expert; to two fixed ones; one expert named twice by every token.
  routings.push_back({"all to expert 5", std::vector<std::int32_t>(1001, 5), 1001, 8, 1});
  std::vector<std::int32_t> two(2 * 1001);
  for (std::size_t n = 0; n < 1001; ++n) {
    two[2 * n] = 7;
    two[2 * n + 1] = 2;
  }
  routings.push_back({"experts 7 and 2", two, 1001, 8, 2});
  routings.push_back({"expert 3 twice", std::vector<std::int32_t>(2 * 1001, 3), 1001, 8, 2});
  for (const Routing& r : routings) {
    SCOPED_TRACE(r.name);
    std::vector<std::int32_t> rows(r.N * r.k), counts(r.E);
    cpu::moe_plan(rows.data(), counts.data(), r.experts.data(), r.N, r.E, r.k);
    const GpuPlan gpu = gpu_plan(stream(), r.experts, r.N, r.E, r.k);
    EXPECT_EQ(gpu.rows, rows);
    EXPECT_EQ(gpu.counts, counts);
  }
  // No tokens: every count written, 0.
  const GpuPlan empty = gpu_plan(stream(), std::vector<std::int32_t>(1, 0), 0, 8, 2);
  EXPECT_EQ(empty.counts, std::vector<std::int32_t>(8, 0));
}

// ---------------------------------------------------------------------------------------- dispatch, combine

TYPED_TEST(MoeCuda, DispatchAndItsBackwardMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  TestStream stream;
  for (const MoeCase<T>& c : moe_cases<T>({false}, 2400)) {
    SCOPED_TRACE(case_name(c));
    const MoeShape& s = c.shape;
    const DeviceCase<T> d(c);
    PoisonedBuffer<T> grouped(s.N * s.k * s.C, 1), dx(s.N * s.C, 1);
    cuda::moe_dispatch<T>(stream.get(), grouped.get(), d.x.get(), d.rows.get(), s.N, s.k, s.C);
    cuda::moe_dispatch_backward<T>(stream.get(), dx.get(), d.dgrouped.get(), d.rows.get(), s.N, s.k, s.C);
    finish();
    EXPECT_TRUE(same_values("dispatch", grouped.download(), cpu_dispatch(c)));
    const std::vector<double> cpu_dx = as_double(cpu_dispatch_backward(c));
    const MoeRef ref = dispatch_backward_reference(as_double(c.dgrouped), c.rows, s.N, s.k, s.C);
    EXPECT_TRUE(within_bounds("dispatch backward", dx.download(), cpu_dx, [&](std::size_t i) {
      return gpu_cpu_allowed<T>(2.0 * s.k, ref.size[i], cpu_dx[i]);
    }));
  }
}

TYPED_TEST(MoeCuda, CombineMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  TestStream stream;
  for (const MoeCase<T>& c : moe_cases<T>({false, true}, 2500)) {
    SCOPED_TRACE(case_name(c));
    const MoeShape& s = c.shape;
    const bool shared = c.shared;
    DeviceCase<T> d(c);
    const std::vector<T> gpu = gpu_combine(stream.get(), c, d);
    const std::vector<double> cpu = as_double(cpu_combine(c));
    const MoeRef ref = combine_reference(as_double(c.residual), as_double(c.expert_out), as_double(c.weights), c.rows,
                                         as_double(c.shared_out), as_double(c.shared_gate), s.N, s.k, s.C);
    const double count = moe_combine_count(s.k, shared, kMoeCpuExp) + moe_combine_count(s.k, shared, kMoeGpuExp);
    EXPECT_TRUE(within_bounds("combine", gpu, cpu, [&](std::size_t i) {
      return gpu_cpu_allowed<T>(count, ref.size[i], cpu[i]);
    }));
    // In place over the residual (the residual stream updated where it is): the GPU's own bits.
    cuda::moe_combine<T>(stream.get(), d.residual.get(), d.residual.get(), d.expert_out.get(), d.weights.get(),
                         d.rows.get(), d.shared_out_or_null(), d.shared_gate_or_null(), s.N, s.k, s.C);
    finish();
    EXPECT_TRUE(same_values("combine (in place over residual)", d.residual.download(), gpu));
  }
}

TYPED_TEST(MoeCuda, CombineBackwardMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  TestStream stream;
  const double sigmoid = moe_sigmoid_count(kMoeCpuExp) + moe_sigmoid_count(kMoeGpuExp);
  for (const MoeCase<T>& c : moe_cases<T>({false, true}, 2600)) {
    SCOPED_TRACE(case_name(c));
    const MoeShape& s = c.shape;
    const bool shared = c.shared;
    DeviceCase<T> d(c);
    const CombineGrads<T> gpu = gpu_combine_backward(stream.get(), c, d);
    const CombineGrads<T> cpu = cpu_combine_backward(c);
    const CombineBackwardRef ref =
        combine_backward_reference(as_double(c.dout), as_double(c.expert_out), as_double(c.weights), c.rows,
                                   as_double(c.shared_out), as_double(c.shared_gate), s.N, s.k, s.C);
    auto check = [&](const std::string& what, const auto& g, const auto& want, const MoeRef& r, double count,
                     bool rounded) {
      const std::vector<double> cpu_d = as_double(want);
      EXPECT_TRUE(within_bounds(what, g, cpu_d, [&](std::size_t i) {
        return gpu_cpu_allowed<T>(count, r.size[i], cpu_d[i], rounded);
      }));
    };
    check("combine dexpert_out", gpu.dexpert_out, cpu.dexpert_out, ref.dexpert_out, 2 * 2, true);
    check("combine dweights", gpu.dweights, cpu.dweights, ref.dweights, 2 * (double(s.C) + 1), false);
    check("combine dshared", gpu.dshared, cpu.dshared, ref.dshared, sigmoid + 2 * 2, true);
    check("combine dshared_gate", gpu.dshared_gate, cpu.dshared_gate, ref.dshared_gate,
          2 * sigmoid + 2 * (double(s.C) + 4), true);

    // In place, as the model calls it: dexpert_out over expert_out, dshared over shared_out.
    PoisonedBuffer<float> dweights(s.N * s.k);
    PoisonedBuffer<T> dshared_gate(shared ? s.N : 0, 1);
    T* over_shared = shared ? d.shared_out.get() : nullptr;
    cuda::moe_combine_backward<T>(stream.get(), d.expert_out.get(), dweights.get(), over_shared,
                                  shared ? dshared_gate.get() : nullptr, d.dout.get(), d.expert_out.get(),
                                  d.weights.get(), d.rows.get(), over_shared, d.shared_gate_or_null(), s.N, s.k, s.C);
    finish();
    EXPECT_TRUE(same_values("dexpert_out (in place over expert_out)", d.expert_out.download(), gpu.dexpert_out));
    EXPECT_TRUE(same_values("dweights (in place call)", dweights.download(), gpu.dweights));
    if (shared) {
      EXPECT_TRUE(same_values("dshared (in place over shared_out)", d.shared_out.download(), gpu.dshared));
      EXPECT_TRUE(same_values("dshared_gate (in place call)", dshared_gate.download(), gpu.dshared_gate));
    }
  }
}

TYPED_TEST(MoeCuda, SharedGateMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  TestStream stream;
  for (const MoeCase<T>& c : moe_cases<T>({true}, 2700)) {
    SCOPED_TRACE(case_name(c));
    const MoeShape& s = c.shape;
    const DeviceCase<T> d(c);
    PoisonedBuffer<T> logits(s.N, 1);
    DeviceBuffer<T> dx(c.dx_start, 1), dweight(c.dweight_start, 1);  // accumulated: from their start values
    cuda::moe_shared_gate_forward<T>(stream.get(), logits.get(), d.x.get(), d.gate_weight.get(), s.N, s.C);
    cuda::moe_shared_gate_backward<T>(stream.get(), dx.get(), dweight.get(), d.dlogits.get(), d.x.get(),
                                      d.gate_weight.get(), s.N, s.C);
    finish();
    const std::vector<double> cpu_logits = as_double(cpu_shared_gate_forward(c));
    const MoeRef fwd = shared_gate_forward_reference(as_double(c.x), as_double(c.gate_weight), s.N, s.C);
    EXPECT_TRUE(within_bounds("shared gate logits", logits.download(), cpu_logits, [&](std::size_t i) {
      return gpu_cpu_allowed<T>(2 * (double(s.C) + 1), fwd.size[i], cpu_logits[i]);
    }));
    const SharedGateGrads<T> cpu = cpu_shared_gate_backward(c);
    const std::vector<double> cpu_dx = as_double(cpu.dx), cpu_dw = as_double(cpu.dweight);
    const SharedGateBackwardRef ref =
        shared_gate_backward_reference(as_double(c.dx_start), as_double(c.dweight_start), as_double(c.dlogits),
                                       as_double(c.x), as_double(c.gate_weight), s.N, s.C);
    EXPECT_TRUE(within_bounds("shared gate dx", dx.download(), cpu_dx, [&](std::size_t i) {
      return gpu_cpu_allowed<T>(2 * 3, ref.dx.size[i], cpu_dx[i]);
    }));
    EXPECT_TRUE(within_bounds("shared gate dweight", dweight.download(), cpu_dw, [&](std::size_t i) {
      return gpu_cpu_allowed<T>(2 * (double(s.N) + 2), ref.dweight.size[i], cpu_dw[i]);
    }));
  }
}

// Zero tokens launch nothing (a zero-block launch would be an error) and touch no pointer; the
// plan still writes its E zero counts.
TYPED_TEST(MoeCuda, ZeroTokensLaunchNothing) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  TestStream stream;
  void* st = stream.get();
  EXPECT_NO_THROW(cuda::moe_router_forward<T>(st, nullptr, nullptr, nullptr, nullptr, 0, 8, 2, true));
  EXPECT_NO_THROW(cuda::moe_router_backward<T>(st, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 8, 2, true));
  EXPECT_NO_THROW(cuda::moe_dispatch<T>(st, nullptr, nullptr, nullptr, 0, 2, 16));
  EXPECT_NO_THROW(cuda::moe_dispatch_backward<T>(st, nullptr, nullptr, nullptr, 0, 2, 16));
  EXPECT_NO_THROW(cuda::moe_combine<T>(st, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 2, 16));
  EXPECT_NO_THROW(cuda::moe_combine_backward<T>(st, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                nullptr, nullptr, nullptr, 0, 2, 16));
  EXPECT_NO_THROW(cuda::moe_shared_gate_forward<T>(st, nullptr, nullptr, nullptr, 0, 16));
  EXPECT_NO_THROW(cuda::moe_shared_gate_backward<T>(st, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 16));
  finish();
}

}  // namespace
}  // namespace trainmem::kernels
