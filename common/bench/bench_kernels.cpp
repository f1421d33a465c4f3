// bench_kernels: the kernels a training step spends its time in, one at a time, through the same
// dispatchers the model calls (kernels/*.h), at the sizes of a GPT-2 124M step.
//
//   build/ci/common/bench_kernels [--device=auto|cpu|cuda] --benchmark_out=kernels.json --benchmark_out_format=json
//
// Sizes, from the model table (common/model/model_config.cpp): gpt2-124m's C = 768, V = 50257
// (padded to Vp = 50304) and its MLP's 4C, at N = B*T rows: on a GPU B = 8, T = 1024 (N = 8192,
// the step bench_mixed_precision and llm.c time), plus a 4096^3 product (the matrix units' rate);
// on the CPU B = 4, T = 256 (N = 1024, the shape kernels/cpu/speed.md measures beside PyTorch).
// Names: <kernel>/<dtype>/N:<N>/C:<C>[/OC:<OC>|/V:<V>], e.g. matmul_forward/bf16/N:4096/C:4096/OC:4096.
//
// Counters: TFLOP_per_s and GB_per_s (with their _per_iteration amounts) from the cost each
// dispatcher declares for its call (kernels/kernel_cost.h: flops, and the bytes it must read and
// write at least), so this benchmark, the planner and a roofline count the same work. GEMMs are
// judged by TFLOP_per_s, the rest by GB_per_s (they are bound by memory bandwidth).
//
// And a whole CPU step by kernel, BM_StepByKernel/<model>: a real training step (fp32, no
// technique) whose every kernel call is timed by the run's cost log (common/device/cost_log.h: on
// the CPU backend each call runs synchronously, so its wall time is its own); counters per step in
// ms: the step's (step_ms), each kernel's (<kernel>_ms), each class's (gemm_ms, attention_ms, memory_ms), host work and
// copies, and outside_kernels_ms (the step's wall time the kernels do not account for). Models:
// `small` B=4 and gpt2-124m cut to 2 layers at T=256, B=4, the shapes kernels/cpu/speed.md
// measures beside PyTorch. The CPU only: on a GPU a launch returns before its kernel ends.
//
// Time: each iteration is one call, timed on the device (common/device/device_timer.h: CUDA events
// on a GPU, the wall clock on the CPU), after an untimed first call (cuBLAS's handles and plans).
// Inputs are random, never zeros: uniform values from a fixed seed, a block of 2^20 repeated
// along the buffer (so that filling 400 M logits costs no more than filling 1 M).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/device/cost_log.h"
#include "common/device/device.h"
#include "common/device/device_ops.h"
#include "common/device/device_timer.h"
#include "common/model/model_config.h"
#include "common/results/benchmark_context.h"
#include "common/tensor/tensor.h"
#include "common/train/train_run.h"
#include "kernels/cross_entropy.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"

namespace trainmem {
namespace {

std::string g_device = "auto";

// The tensor dtype of a buffer of T.
template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, kernels::bf16>) return DType::bf16;
  else if constexpr (std::is_same_v<T, kernels::fp16>) return DType::f16;
  else if constexpr (std::is_same_v<T, std::int32_t>) return DType::i32;
  else {
    static_assert(std::is_same_v<T, float>, "a buffer of float, bf16, fp16 or int32");
    return DType::f32;
  }
}

// The work of every call a case makes, as the dispatchers declare it.
class DeclaredWork : public kernels::KernelCostLog {
 public:
  void record(const kernels::KernelCall& call, double) override {
    flops += call.flops;
    bytes += call.bytes;
  }
  double flops = 0, bytes = 0;
};

// One case's device and buffers.
class Buffers {
 public:
  Buffers() {
    DeviceOptions options;
    options.choice = g_device;
    device_ = Device::open(options);
  }
  Device& device() { return *device_; }

  // numel elements of T, uniform in [lo, hi).
  template <typename T>
  T* random(std::size_t numel, float lo, float hi, std::uint32_t seed) {
    std::vector<T> block(std::min<std::size_t>(numel, std::size_t{1} << 20));
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uniform(lo, hi);
    for (T& x : block) x = kernels::store<T>(uniform(rng));
    T* data = empty<T>(numel);
    for (std::size_t at = 0; at < numel; at += block.size())
      copy_host_to_device(*device_, data + at, block.data(), std::min(block.size(), numel - at) * sizeof(T));
    return data;
  }
  // numel class indices below V.
  std::int32_t* targets(std::size_t numel, std::size_t V, std::uint32_t seed) {
    std::vector<std::int32_t> host(numel);
    std::mt19937 rng(seed);
    std::uniform_int_distribution<std::int32_t> uniform(0, static_cast<std::int32_t>(V) - 1);
    for (auto& t : host) t = uniform(rng);
    std::int32_t* data = empty<std::int32_t>(numel);
    copy_host_to_device(*device_, data, host.data(), numel * sizeof(std::int32_t));
    return data;
  }
  template <typename T>
  T* empty(std::size_t numel) {
    tensors_.emplace_back(device_->allocator(), std::vector<std::int64_t>{std::int64_t(numel)}, dtype_of<T>(),
                          MemoryCategory::activations, "buffer");
    return tensors_.back().data_as<T>();
  }
  void* workspace(std::size_t bytes) {
    const auto floats = static_cast<std::int64_t>((bytes + sizeof(float) - 1) / sizeof(float));
    tensors_.emplace_back(device_->allocator(), std::vector<std::int64_t>{floats}, DType::f32,
                          MemoryCategory::workspace, "workspace");
    return tensors_.back().data();
  }

 private:
  std::unique_ptr<Device> device_;
  std::vector<Tensor> tensors_;  // declared after device_: freed before it is closed
};

// A first call declares the work and warms up; then each iteration is one timed call.
void run(benchmark::State& state, Device& device, const std::function<void(const kernels::Stream&)>& call) {
  DeclaredWork work;
  kernels::Stream declaring = kernel_stream(device);
  declaring.costs = &work;
  call(declaring);
  device.synchronize();
  const kernels::Stream stream = kernel_stream(device);
  DeviceTimer timer(device);
  for (auto _ : state) {
    timer.start();
    call(stream);
    state.SetIterationTime(timer.stop());
  }
  set_rate_counters(state, "TFLOP", work.flops / 1e12);
  set_rate_counters(state, "GB", work.bytes / 1e9);
}

// Any failure (an out-of-memory, a CUDA error) ends the case with its message, never silently.
void guarded(benchmark::State& state, const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// out[N, OC] = inp[N, C] weight[OC, C]^T + bias; backward: dinp, dweight and dbias.
template <typename T>
void BM_Matmul(benchmark::State& state, bool backward, std::size_t N, std::size_t C, std::size_t OC) {
  guarded(state, [&] {
    Buffers b;
    const T* inp = b.random<T>(N * C, -1, 1, 1);
    const T* weight = b.random<T>(OC * C, -0.05f, 0.05f, 2);
    const T* bias = b.random<T>(OC, -0.1f, 0.1f, 3);
    if (!backward) {
      T* out = b.empty<T>(N * OC);
      run(state, b.device(), [&](const kernels::Stream& s) {
        kernels::matmul_forward<T>(s, out, inp, weight, bias, N, C, OC);
      });
      return;
    }
    const T* dout = b.random<T>(N * OC, -1, 1, 4);
    T* dinp = b.empty<T>(N * C);
    T* dweight = b.random<T>(OC * C, -0.01f, 0.01f, 5);
    T* dbias = b.random<T>(OC, -0.01f, 0.01f, 6);
    run(state, b.device(), [&](const kernels::Stream& s) {
      kernels::matmul_backward<T>(s, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
    });
  });
}

template <typename T>
void BM_LayerNorm(benchmark::State& state, bool backward, std::size_t N, std::size_t C) {
  guarded(state, [&] {
    Buffers b;
    const T* x = b.random<T>(N * C, -2, 2, 1);
    const T* weight = b.random<T>(C, 0.5f, 1.5f, 2);
    const T* bias = b.random<T>(C, -0.1f, 0.1f, 3);
    T* out = b.empty<T>(N * C);
    float* mean = b.empty<float>(N);
    float* rstd = b.empty<float>(N);
    kernels::layernorm_forward<T>(kernel_stream(b.device()), out, mean, rstd, x, weight, bias, N, C);
    if (!backward) {
      run(state, b.device(), [&](const kernels::Stream& s) {
        kernels::layernorm_forward<T>(s, out, mean, rstd, x, weight, bias, N, C);
      });
      return;
    }
    const T* dout = b.random<T>(N * C, -1, 1, 4);
    T* dx = b.random<T>(N * C, -0.01f, 0.01f, 5);
    T* dweight = b.random<T>(C, -0.01f, 0.01f, 6);
    T* dbias = b.random<T>(C, -0.01f, 0.01f, 7);
    void* workspace = b.workspace(kernels::layernorm_backward_workspace_bytes(N, C));
    run(state, b.device(), [&](const kernels::Stream& s) {
      kernels::layernorm_backward<T>(s, dx, dweight, dbias, dout, x, weight, mean, rstd, workspace, N, C);
    });
  });
}

// N rows of Vp logits, V of them classes.
template <typename T>
void BM_CrossEntropy(benchmark::State& state, bool backward, std::size_t N, std::size_t V) {
  guarded(state, [&] {
    const std::size_t Vp = padded_vocab(V);
    Buffers b;
    const T* logits = b.random<T>(N * Vp, -4, 4, 1);
    const std::int32_t* targets = b.targets(N, V, 2);
    float* losses = b.empty<float>(N);
    if (!backward) {
      run(state, b.device(), [&](const kernels::Stream& s) {
        kernels::cross_entropy_forward<T>(s, losses, logits, targets, N, V, Vp);
      });
      return;
    }
    // Training's call: the gradient written over the logits, as the model calls it (from the second
    // call on over the last call's gradient: the same work on other values).
    T* dlogits = const_cast<T*>(logits);
    const float dloss = 1.0f / static_cast<float>(N);
    run(state, b.device(), [&](const kernels::Stream& s) {
      kernels::cross_entropy_forward_backward<T>(s, losses, dlogits, logits, targets, dloss, N, V, Vp);
    });
  });
}

// Seconds by kernel name over the steps it listens to.
class StepKernelTimes : public CostLog {
 public:
  void kernel(const kernels::KernelCall& call, double seconds) override {
    by_kernel[call.name] += seconds;
    by_class[kernels::to_string(call.kind)] += seconds;
  }
  void host_work(const kernels::KernelCall& call, double seconds) override { by_kernel[call.name] += seconds; }
  void copy(CopyDirection, double, double seconds) override { copies += seconds; }
  void collective(Collective, const CommCounts&, int, bool, std::uint64_t) override {}
  void collective_wait(std::uint64_t, double) override {}
  void begin_micro_batch(long, std::size_t) override {}
  void begin_optimizer(long) override {}
  void end_step(long, double seconds) override {
    step_seconds += seconds;
    ++steps;
  }
  std::map<std::string, double> by_kernel, by_class;
  double copies = 0, step_seconds = 0;
  int steps = 0;
};

void BM_StepByKernel(benchmark::State& state, ModelConfig config, std::size_t batch) {
  guarded(state, [&] {
    static const Techniques none{};
    TrainRun run = make_train_run(g_device, baseline_setup(config, batch), none);
    run.step();  // warm-up: the optimizer's state, the allocator's cache
    StepKernelTimes times;
    run.device->set_cost_log(&times);
    for (auto _ : state) {
      const double ms = run.step().ms;
      state.SetIterationTime(ms / 1e3);
    }
    run.device->set_cost_log(nullptr);
    const double per_step = 1e3 / std::max(times.steps, 1);  // seconds over the steps -> ms a step
    double in_kernels = 0;
    for (const auto& [name, seconds] : times.by_kernel) {
      state.counters[name + "_ms"] = seconds * per_step;
      in_kernels += seconds;
    }
    for (const auto& [kind, seconds] : times.by_class) state.counters[kind + "_ms"] = seconds * per_step;
    state.counters["step_ms"] = times.step_seconds * per_step;
    state.counters["copies_ms"] = times.copies * per_step;
    state.counters["outside_kernels_ms"] = (times.step_seconds - in_kernels - times.copies) * per_step;
    set_rate_counters(state, "tokens", static_cast<double>(batch * config.seq));
    state.SetLabel(config.label());
  });
}

std::string dims(std::size_t N, std::size_t C) { return "/N:" + std::to_string(N) + "/C:" + std::to_string(C); }

template <typename T>
void register_dtype(bool gpu) {
  const ModelConfig gpt2 = model_preset("gpt2-124m");
  const std::size_t N = gpu ? 8 * 1024 : 4 * 256, C = gpt2.dim, F = gpt2.mlp_dim(), V = gpt2.vocab;
  const std::string dtype = kernels::dtype_name<T>();
  const auto add = [](const std::string& name, auto... args) {
    benchmark::RegisterBenchmark(name.c_str(), args...)->UseManualTime()->Unit(benchmark::kMicrosecond);
  };
  // The MLP's first product (the widest of a block), forward and backward; on a GPU, 4096^3.
  for (bool backward : {false, true})
    add((backward ? "matmul_backward/" : "matmul_forward/") + dtype + dims(N, C) + "/OC:" + std::to_string(F),
        BM_Matmul<T>, backward, N, C, F);
  if (gpu) add("matmul_forward/" + dtype + dims(4096, 4096) + "/OC:4096", BM_Matmul<T>, false, 4096, 4096, 4096);
  for (bool backward : {false, true})
    add((backward ? "layernorm_backward/" : "layernorm_forward/") + dtype + dims(N, C), BM_LayerNorm<T>, backward, N,
        C);
  for (bool backward : {false, true})
    add((backward ? "cross_entropy_forward_backward/" : "cross_entropy_forward/") + dtype + "/N:" + std::to_string(N) +
            "/V:" + std::to_string(V),
        BM_CrossEntropy<T>, backward, N, V);
}

void register_steps() {
  ModelConfig gpt2_cut = model_preset("gpt2-124m");  // the 124M shape of issue 41: 2 layers, T = 256
  gpt2_cut.layers = 2;
  gpt2_cut.seq = 256;
  const std::pair<std::string, ModelConfig> models[] = {{"small", model_preset("small")},
                                                       {"gpt2-124m-L2-T256", gpt2_cut}};
  for (const auto& [name, config] : models)
    benchmark::RegisterBenchmark(("BM_StepByKernel/" + name).c_str(), BM_StepByKernel, config, std::size_t{4})
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
}

}  // namespace
}  // namespace trainmem

int main(int argc, char** argv) {
  return trainmem::benchmark_main(argc, argv, "bench_kernels", [](const std::string& device, bool gpu) {
    trainmem::g_device = device;
    trainmem::register_dtype<float>(gpu);
    trainmem::register_dtype<trainmem::kernels::bf16>(gpu);
    if (!gpu) trainmem::register_steps();
  });
}
