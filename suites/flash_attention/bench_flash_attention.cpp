// bench_flash_attention: attention's time and the memory its forward keeps for the backward,
// naive (the T x T probabilities) against flash (O and one log-sum-exp per row).
//
//   build/ci/suites/flash_attention/bench_flash_attention [--device=auto|cpu|cuda] --benchmark_out=fa.json --benchmark_out_format=json
//
// Shapes, FLOP count, names and counters: attention_bench_cases.h. On the CPU, fp32:
//   naive_cpu   kernels::cpu::attention_reference_forward/backward (materialized S and P)
//   flash_cpu   kernels::cpu::flash_attention_forward/backward (tiles 32 x 32)
// Both are the readable plain-loop references, not tuned kernels: compare their memory, and
// their times with each other, not with a GPU. On a GPU, bench_flash_attention_cuda.cu adds
// the CUDA versions.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "common/results/benchmark_context.h"
#include "kernels/flash_attention.h"
#include "suites/flash_attention/attention_bench_cases.h"

namespace trainmem::attention_bench {
namespace {

enum class Impl { naive, flash };
constexpr std::size_t kBlock = 32;  // flash tiles: block_q = block_k = 32 (the defaults)

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// What each implementation keeps from forward to backward beyond its inputs (qkv) and the
// gradient it is given (dout), in bytes (fp32):
//   naive: the probabilities P, B*H*T*T floats. (out is not counted: its backward does not read it.)
//   flash: out, B*T*C floats, and lse, B*H*T floats — what its backward reads instead of P.
double saved_bytes(Impl impl, const kernels::AttentionShape& s) {
  const double B = double(s.B), T = double(s.T), H = double(s.H), C = double(s.C());
  return impl == Impl::naive ? B * H * T * T * 4 : (B * T * C + B * H * T) * 4;
}

// The largest scratch of the pass as the CPU code allocates it, in bytes (fp32):
//   naive forward:  the scores S, B*H*T*T (P is counted as saved);
//   naive backward: S, dP and dS, 3*B*H*T*T (its P is counted as saved, though this reference
//                   rebuilds it: its signature keeps nothing from the forward), the rebuilt lse,
//                   B*H*T, and dqkv summed in fp32 before it is stored, B*T*(H + 2Hkv)*D;
//   flash forward:  one tile of scores, block_q*block_k, and per query row of a tile m, l and
//                   the unnormalized O: block_q*(D+2);
//   flash backward: D = rowsum(dO*O), B*H*T; dQ of one (batch, head), T*D; the tiles P and dS,
//                   2*block_q*block_k; the accumulators dK_j and dV_j, 2*block_k*D.
double workspace_bytes(Impl impl, Pass pass, const kernels::AttentionShape& s) {
  const double B = double(s.B), T = double(s.T), H = double(s.H), D = double(s.D),
               b = double(kBlock);
  if (impl == Impl::naive)
    return pass == Pass::forward ? B * H * T * T * 4 : (3 * B * H * T * T + B * H * T + B * T * double(s.qkv_width())) * 4;
  const double forward = (b * b + b * (D + 2)) * 4;
  const double backward = (B * H * T + T * D + 2 * b * b + 2 * b * D) * 4;
  return pass == Pass::forward ? forward : std::max(forward, backward);
}

void BM_AttentionCpu(benchmark::State& state, Impl impl, Pass pass, kernels::AttentionShape s) {
  const std::vector<float> qkv = random_floats(s.B * s.T * s.qkv_width(), 1);
  const std::vector<float> dout = random_floats(s.B * s.T * s.C(), 2);
  std::vector<float> out(s.B * s.T * s.C()), lse(s.B * s.H * s.T), dqkv(qkv.size());
  for (auto _ : state) {
    if (impl == Impl::naive) {
      kernels::cpu::attention_reference_forward(out.data(), lse.data(), qkv.data(), s);
      if (pass == Pass::forward_backward)
        kernels::cpu::attention_reference_backward(dqkv.data(), dout.data(), qkv.data(), s);
    } else {
      kernels::cpu::flash_attention_forward(out.data(), lse.data(), qkv.data(), s, kBlock, kBlock);
      if (pass == Pass::forward_backward)
        kernels::cpu::flash_attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), s,
                                               kBlock, kBlock);
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::DoNotOptimize(dqkv.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, s, pass, saved_bytes(impl, s), workspace_bytes(impl, pass, s));
  std::string label = "B=";
  label += std::to_string(s.B);
  label += " H=";
  label += std::to_string(s.H);
  state.SetLabel(label);
}

void register_cpu_benchmarks() {
  for (Pass pass : {Pass::forward, Pass::forward_backward})
    for (const kernels::AttentionShape& s : cpu_shapes())
      for (Impl impl : {Impl::naive, Impl::flash})
        benchmark::RegisterBenchmark(name(impl == Impl::naive ? "naive_cpu" : "flash_cpu", pass, s).c_str(),
                                     BM_AttentionCpu, impl, pass, s)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
}

}  // namespace
}  // namespace trainmem::attention_bench

int main(int argc, char** argv) {
  return trainmem::benchmark_main(argc, argv, "bench_flash_attention", [](const std::string&, bool gpu) {
    trainmem::attention_bench::register_cpu_benchmarks();
    // The CUDA part exists where CUDA is compiled and bench_flash_attention_cuda.cu is linked in
    // (suites/flash_attention/CMakeLists.txt defines TRAINMEM_FLASH_ATTENTION_CUDA_BENCH then).
#if defined(TRAINMEM_WITH_CUDA) && TRAINMEM_WITH_CUDA && defined(TRAINMEM_FLASH_ATTENTION_CUDA_BENCH)
    if (gpu) trainmem::attention_bench::register_cuda_benchmarks();
#else
    (void)gpu;
#endif
  });
}
