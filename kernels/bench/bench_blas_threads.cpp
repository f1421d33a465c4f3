// bench_blas_threads: the fp32 CPU linear layer (forward and backward, kernels/matmul.h) at the
// products of the models trainmem trains, on 1 OpenBLAS thread and on all of them, to place the
// threshold of the thread policy (kernels/cpu/blas_threads.h) where a second thread starts to pay.
//
//   build/cpu/kernels/bench_blas_threads --benchmark_min_time=0.5
//
// Name: BM_Linear/<model>/<N>x<C>x<OC>/blas_threads:<1|all> (not "threads:", which is Google
// Benchmark's own option in a name). Counters: blas_threads, the threads used; mnk, N * C * OC, the size of each
// of its three products (forward, dinp, dweight). Compare the pairs' real time; on a shared
// machine, run it more than once and note the load.
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/blas_threads.h"
#include "kernels/matmul.h"

namespace {
namespace cpu = trainmem::kernels::cpu;

void BM_Linear(benchmark::State& state, std::size_t N, std::size_t C, std::size_t OC, bool all_threads) {
  const cpu::BlasThreadPolicy before = cpu::blas_thread_policy();
  cpu::BlasThreadPolicy policy = before;
  policy.min_mnk = all_threads ? 0 : 1e300;  // every product threaded, or none
  cpu::set_blas_thread_policy(policy);

  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  auto random = [&](std::size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = u(rng);
    return v;
  };
  const std::vector<float> inp = random(N * C), weight = random(OC * C), bias = random(OC), dout = random(N * OC);
  std::vector<float> out(N * OC), dinp(N * C), dweight(OC * C), dbias(OC);
  for (auto _ : state) {
    cpu::matmul_forward<float>(out.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
    cpu::matmul_backward<float>(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(), N,
                                C, OC);
    benchmark::DoNotOptimize(out.data());
    benchmark::DoNotOptimize(dweight.data());
  }
  state.counters["mnk"] = static_cast<double>(N * C * OC);
  state.counters["blas_threads"] = all_threads ? policy.max_threads : 1;
  cpu::set_blas_thread_policy(before);
}

struct Shape {
  const char* model;
  std::size_t N, C, OC;
};
// The products of a step: small (B=4, T=128, C=128, V=256) and gpt2-124m cut to 2 layers (B=4,
// T=256, C=768, V=50257 padded to Vp=50304, common/model/model_config.h): qkv, attention projection,
// fc, fc projection, logits.
constexpr Shape kShapes[] = {
    {"small", 512, 128, 384},  {"small", 512, 128, 128},  {"small", 512, 128, 512},  {"small", 512, 512, 128},
    {"small", 512, 128, 256},  {"124m", 1024, 768, 2304}, {"124m", 1024, 768, 768},  {"124m", 1024, 768, 3072},
    {"124m", 1024, 3072, 768}, {"124m", 1024, 768, 50304},
};

}  // namespace

int main(int argc, char** argv) {
  for (const Shape& s : kShapes)
    for (bool all : {false, true}) {
      const std::string name = std::string("BM_Linear/") + s.model + "/" + std::to_string(s.N) + "x" +
                               std::to_string(s.C) + "x" + std::to_string(s.OC) + "/blas_threads:" + (all ? "all" : "1");
      benchmark::RegisterBenchmark(name.c_str(), BM_Linear, s.N, s.C, s.OC, all)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
