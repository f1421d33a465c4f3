// What bench_flash_attention measures, shared by its CPU part (bench_flash_attention.cpp) and
// its CUDA part (bench_flash_attention_cuda.cu): the shapes, the FLOP count and the counters.
//
// Shapes (the FlashAttention-2 paper's benchmark): B*T = 16384 tokens, H*D = 2048 channels,
// D = 64 or 128, T = 512 ... 16384, causal and not. On the CPU a reduced set.
//
// FLOPs, as FlashAttention reports them: forward 4*B*H*T^2*D (two matmuls, QK^T and PV), halved
// when causal; backward 2.5x forward (five matmuls instead of two).
#pragma once
#include <benchmark/benchmark.h>

#include <cstddef>
#include <string>
#include <vector>

#include "common/results/benchmark_context.h"
#include "kernels/flash_attention.h"

namespace trainmem::attention_bench {

enum class Pass { forward, forward_backward };

inline double forward_flops(const kernels::AttentionShape& s) {
  const double f = 4.0 * double(s.B) * double(s.H) * double(s.T) * double(s.T) * double(s.D);
  return s.causal ? f / 2 : f;
}
inline double flops(const kernels::AttentionShape& s, Pass pass) {
  return pass == Pass::forward ? forward_flops(s) : forward_flops(s) * (1.0 + 2.5);
}

// Grouped-query attention, as the Llama family runs it: causal, 4 query heads a K/V head (Llama-3
// 8B's 32 on 8), the same H*D; Hkv is the shape's last field (kernels/flash_attention.h).
constexpr std::size_t kQueryHeadsPerKvHead = 4;

// The GPU sweep: B*T = 16384, H*D = 2048; then grouped-query attention at D = 128, causal.
inline std::vector<kernels::AttentionShape> gpu_shapes() {
  std::vector<kernels::AttentionShape> out;
  for (std::size_t D : {64u, 128u})
    for (bool causal : {false, true})
      for (std::size_t T = 512; T <= 16384; T *= 2) out.push_back({16384 / T, T, 2048 / D, D, causal});
  for (std::size_t T = 512; T <= 16384; T *= 2)
    out.push_back({16384 / T, T, 2048 / 128, 128, true, 2048 / 128 / kQueryHeadsPerKvHead});
  return out;
}
// The CPU sweep: B*T = 1024, H*D = 256 (2 cores cannot do the GPU sweep in a CI run); then
// grouped-query attention, causal.
inline std::vector<kernels::AttentionShape> cpu_shapes() {
  std::vector<kernels::AttentionShape> out;
  for (std::size_t D : {64u})
    for (bool causal : {false, true})
      for (std::size_t T = 128; T <= 512; T *= 2) out.push_back({1024 / T, T, 256 / D, D, causal});
  for (std::size_t T = 128; T <= 512; T *= 2) out.push_back({1024 / T, T, 256 / 64, 64, true, 256 / 64 / kQueryHeadsPerKvHead});
  return out;
}

// "attention/<impl>/<fwd|fwd_bwd>/T:<T>/D:<D>/causal:<0|1>[/Hkv:<Hkv>]", e.g.
// attention/flash_v3_bf16/fwd/T:4096/D:128/causal:0; grouped-query attention adds its K/V heads.
inline std::string name(const std::string& impl, Pass pass, const kernels::AttentionShape& s) {
  std::string n = "attention/" + impl + (pass == Pass::forward ? "/fwd" : "/fwd_bwd");
  n += "/T:" + std::to_string(s.T);
  n += "/D:" + std::to_string(s.D);
  n += s.causal ? "/causal:1" : "/causal:0";
  if (s.kv_heads() != s.H) n += "/Hkv:" + std::to_string(s.kv_heads());
  return n;
}

// Counters every attention benchmark sets:
//   TFLOP/s         FLOPs per second of wall-clock time / 1e12 (the count above; UseRealTime)
//   TFLOP_per_iteration  the count / 1e12
//   B, T, D, causal, Hkv  the shape (the CPU shapes keep B*T = 1024; Hkv = H but for GQA)
//   saved_bytes     what the forward keeps for the backward (naive: probabilities B*H*T*T;
//                   flash/cudnn: O and the log-sum-exp)
//   workspace_bytes the largest scratch the pass needs besides its inputs and outputs
inline void set_counters(benchmark::State& state, const kernels::AttentionShape& s, Pass pass, double saved_bytes,
                         double workspace_bytes) {
  state.counters["TFLOP/s"] =  // the name the report and the GPU notes use; rate x time = TFLOP_per_iteration
      benchmark::Counter(flops(s, pass) / 1e12, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["TFLOP_per_iteration"] = flops(s, pass) / 1e12;
  state.counters["B"] = double(s.B);
  state.counters["saved_bytes"] = bytes_counter(saved_bytes);
  state.counters["workspace_bytes"] = bytes_counter(workspace_bytes);
  state.counters["T"] = double(s.T);
  state.counters["D"] = double(s.D);
  state.counters["causal"] = s.causal ? 1 : 0;
  state.counters["Hkv"] = double(s.kv_heads());
}

// Defined in bench_flash_attention_cuda.cu, which is linked only where CUDA is compiled; the CPU
// part calls it only then (TRAINMEM_FLASH_ATTENTION_CUDA_BENCH).
void register_cuda_benchmarks();

}  // namespace trainmem::attention_bench
