// The tolerance model of cuda_vs_cpu_tolerance.h checked where it can be without a GPU: the CPU's
// 16-bit run differs from its fp32 run by the rounding at every stored stage (u each, one side),
// which the model bounds the same way it bounds CUDA against the CPU (2u, both sides). If a stage
// amplified differences (a condition number well above 1), these would exceed the bound. And the
// bound is not vacuous: a run on other tokens is far outside it.
#include <gtest/gtest.h>

#include "suites/trainmem/tests/cuda_vs_cpu_tolerance.h"
#include "suites/trainmem/tests/training_trace.h"

namespace trainmem {
namespace {

using testing_support::CudaVsCpuTolerance;
using testing_support::Rounding;
using testing_support::trace_training;
using testing_support::TraceSetup;

TraceSetup setup_of(const std::string& preset, Precision precision, AttentionKind attention) {
  TraceSetup s;
  s.model = model_preset(preset);
  s.options.precision = precision;
  s.options.attention = attention;
  return s;
}

struct Case {
  const char* preset;
  Precision precision;
  AttentionKind attention;
};

class SixteenBitAgainstFp32 : public testing::TestWithParam<Case> {};

TEST_P(SixteenBitAgainstFp32, StaysWithinTheModelsBound) {
  const Case c = GetParam();
  const TraceSetup sixteen = setup_of(c.preset, c.precision, c.attention);
  const TraceSetup fp32 = setup_of(c.preset, Precision::fp32, c.attention);
  const CudaVsCpuTolerance tol(sixteen.model, sixteen.batch, c.precision, sixteen.adam, Rounding::one_side);
  EXPECT_TRUE(testing_support::traces_agree(trace_training("cpu", sixteen), trace_training("cpu", fp32), tol));
}

INSTANTIATE_TEST_SUITE_P(Cpu, SixteenBitAgainstFp32,
                         testing::Values(Case{"tiny", Precision::bf16, AttentionKind::naive},
                                         Case{"tiny", Precision::fp16, AttentionKind::naive},
                                         Case{"tiny-hd64", Precision::bf16, AttentionKind::flash},
                                         Case{"tiny-hd64", Precision::fp16, AttentionKind::flash},
                                         Case{"llama-tiny", Precision::bf16, AttentionKind::naive},
                                         Case{"llama-tiny", Precision::fp16, AttentionKind::flash}),
                         [](const testing::TestParamInfo<Case>& info) {
                           std::string name = std::string(info.param.preset) + "_" + to_string(info.param.precision) +
                                              "_" + to_string(info.param.attention);
                           for (char& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

TEST(CudaVsCpuTolerance, ARunOnOtherTokensIsOutsideIt) {
  for (Precision precision : {Precision::fp32, Precision::bf16, Precision::fp16}) {
    const TraceSetup a = setup_of("tiny", precision, AttentionKind::naive);
    TraceSetup b = a;
    b.data_seed = 2;
    const CudaVsCpuTolerance tol(a.model, a.batch, precision, a.adam);
    EXPECT_FALSE(testing_support::traces_agree(trace_training("cpu", b), trace_training("cpu", a), tol))
        << to_string(precision);
  }
}

}  // namespace
}  // namespace trainmem
