// bench_allocator: what the caching allocator, empty_cache() and expandable segments are worth.
//
//   build/ci/suites/allocator/bench_allocator [--device=auto|cpu|cuda] --benchmark_out=alloc.json --benchmark_out_format=json
//
// 1. BM_AllocFree/<mode>/<segments>/<bytes>: one allocate + free of a block.
//      hit    the block comes from the cache (the steady state of a training loop)
//      miss   empty_cache() after every free, so every allocate asks the device (a segment, or
//             pages of an expandable segment) and every empty_cache gives it back
//      raw    backend:raw: one device allocation and one device free per request
//    .../touch (CPU only): the block's pages are also written once (one byte per 4 KiB), as a
//    kernel using them would: fresh pages from the OS are zero-filled on first touch.
// 2. BM_LayerPattern/<config>: 64 tensors of mixed sizes allocated in order and freed in reverse.
// 3. BM_TrainEmptyCache/<segments>/<policy>: one training step (`small`, B = 4 on the CPU;
//    gpt2-124m, B = 8 on a GPU) with --empty-cache never | every-step | every:4: step time, peak
//    reserved, device calls per step.
// 4. BM_ReservedGrowth/<case>: 20 steps of `tiny`; how reserved and allocated (at the step's end)
//    move when nothing leaks, when a tensor is kept every step (a leak), and when the sequence
//    length grows (no leak).
// 5. BM_GrowingSequence/<config>: a GPT whose sequence length grows by 64 each step, on a fixed
//    128 MiB budget, until out of memory: the last length that trained, reserved vs allocated,
//    inactive split bytes, retries.
// 6. BM_GrowingWithKeptTensors/<config>: the pattern of test_allocator_expandable.cpp (a growing
//    activation and a kept 2 MiB tensor per step) on a simulated 256 MiB card, until out of memory.
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/results/benchmark_context.h"
#include "common/model/gpt.h"
#include "common/train/adamw_optimizer.h"
#include "common/train/train_run.h"
#include "generated/result_schema.h"
#include "suites/allocator/empty_cache_technique.h"
#include "suites/allocator/empty_cache_policy.h"

namespace trainmem::allocator {
namespace {

std::string g_device_choice = "auto";

constexpr const char* kFixed = "";
constexpr const char* kExpandable = "expandable_segments:True";
constexpr const char* kRaw = "backend:raw";

std::string segments_name(const std::string& config) {
  if (config.empty()) return "fixed";
  if (config == kExpandable) return "expandable";
  if (config == kRaw) return "raw";
  return config;
}

// One device per allocator config, opened once (opening a GPU is slow) and kept for all runs.
Device& device_for(const std::string& config) {
  static std::map<std::string, std::unique_ptr<Device>> devices;
  auto& d = devices[config];
  if (!d) {
    DeviceOptions options;
    options.choice = g_device_choice;
    options.allocator = AllocatorConfig::parse(config);
    d = Device::open(options);
  }
  return *d;
}

DeviceOptions options_for(const std::string& config, std::size_t budget = 0) {
  DeviceOptions options;
  options.choice = g_device_choice;
  options.allocator = AllocatorConfig::parse(config);
  if (budget) options.device_memory = budget;
  return options;
}

// Page faults of this process so far: on the CPU backend, memory fresh from the OS (after a
// segment is given back and taken again) is zero-filled on first touch, one fault per 4 KiB page.
std::int64_t minor_page_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

benchmark::Counter per_iteration(std::int64_t count) {
  return benchmark::Counter(static_cast<double>(count), benchmark::Counter::kAvgIterations);
}

// --- 1. the cost of one allocation

enum class Mode { hit, miss, raw };

void BM_AllocFree(benchmark::State& state, Mode mode, std::string config, bool touch) {
  CachingAllocator& a = device_for(config).allocator();
  const auto bytes = static_cast<std::size_t>(state.range(0));
  a.empty_cache();
  const MemoryStats before = a.stats();
  for (auto _ : state) {
    void* p = a.allocate(bytes, MemoryCategory::workspace);
    benchmark::DoNotOptimize(p);
    if (touch) {
      auto* bytes_of = static_cast<volatile unsigned char*>(p);
      for (std::size_t i = 0; i < bytes; i += 4096) bytes_of[i] = 1;
    }
    a.free(p);
    if (mode == Mode::miss) a.empty_cache();
  }
  const MemoryStats after = a.stats();
  state.counters["device_allocs_per_iter"] = per_iteration(after.num_device_alloc - before.num_device_alloc);
  state.counters["device_frees_per_iter"] = per_iteration(after.num_device_free - before.num_device_free);
  set_rate_counters(state, "bytes", static_cast<double>(bytes));
}

// --- 2. a forward/backward-like pattern of mixed sizes

void BM_LayerPattern(benchmark::State& state, std::string config) {
  CachingAllocator& a = device_for(config).allocator();
  a.empty_cache();
  a.reset_peak_stats();
  const std::size_t sizes[] = {3 * KiB, 768 * KiB, 2304 * KiB, 12 * MiB, 256, 3 * MiB, 48 * MiB, 9 * MiB};
  std::vector<void*> live;
  const MemoryStats before = a.stats();
  for (auto _ : state) {
    for (int i = 0; i < 64; ++i) live.push_back(a.allocate(sizes[i % 8], MemoryCategory::activations));
    while (!live.empty()) {
      a.free(live.back());
      live.pop_back();
    }
  }
  const MemoryStats after = a.stats();
  set_rate_counters(state, "blocks", 64.0);
  state.counters["device_allocs_per_iter"] = per_iteration(after.num_device_alloc - before.num_device_alloc);
  set_memory_counters(state, after);
}

// --- 3. empty_cache policies in a training run

void BM_TrainEmptyCache(benchmark::State& state, std::string config, std::string policy_text, ModelConfig model,
                        std::size_t batch) {
  static const Techniques empty_cache{&empty_cache_technique()};
  const EmptyCachePolicy policy = EmptyCachePolicy::parse(policy_text);
  TrainingSetup setup = baseline_setup(model, batch);
  setup.option<EmptyCachePolicy>() = policy;
  TrainRun run = make_train_run(options_for(config), setup, empty_cache);
  run.step();  // warm-up: the optimizer state, the first segments
  run.step();
  run.device->allocator().reset_peak_stats();
  const MemoryStats before = run.stats();
  const std::int64_t faults_before = minor_page_faults();
  std::int64_t reserved_at_step_end = 0;
  for (auto _ : state) reserved_at_step_end = run.step().reserved_bytes;
  const MemoryStats after = run.stats();
  state.counters["host_page_faults_per_step"] = per_iteration(minor_page_faults() - faults_before);
  set_memory_counters(state, after);
  state.counters["reserved_at_step_end_bytes"] = bytes_counter(static_cast<double>(reserved_at_step_end));
  state.counters["device_allocs_per_step"] = per_iteration(after.num_device_alloc - before.num_device_alloc);
  state.counters["device_frees_per_step"] = per_iteration(after.num_device_free - before.num_device_free);
  set_rate_counters(state, "tokens", static_cast<double>(batch * model.seq));
  state.SetLabel(model.name + " B=" + std::to_string(batch) + " " + segments_name(config) +
                 " empty-cache=" + policy.to_string());
}

// --- 4. does reserved memory that keeps growing mean a leak?

// Keeps one tensor per optimizer step forever: the classic leak (e.g. a loss history kept as
// device tensors, each holding on to its storage).
class KeepATensorEveryStep : public Strategy {
 public:
  explicit KeepATensorEveryStep(std::size_t bytes) : bytes_(bytes) {}
  std::string name() const override { return "leak"; }
  void after_optimizer_step(StepContext& ctx) override {
    kept_.emplace_back(ctx.model.device().allocator(), std::vector<std::int64_t>{static_cast<std::int64_t>(bytes_ / 4)},
                       DType::f32, MemoryCategory::other, "kept");
  }

 private:
  std::size_t bytes_;
  std::vector<Tensor> kept_;
};

enum class GrowthCase { no_leak, leak, growing_sequence };

void BM_ReservedGrowth(benchmark::State& state, GrowthCase growth_case) {
  constexpr long kSteps = 20;
  constexpr std::size_t kBatch = 4;
  for (auto _ : state) {
    ModelConfig config = model_preset("tiny");
    if (growth_case == GrowthCase::growing_sequence) config.seq = 16 * kSteps;
    auto device = Device::open(options_for(kFixed));
    GPT model(*device, config, 1);
    AdamWOptimizer optimizer(model, kernels::AdamWHyper{}, 1.0f);
    KeepATensorEveryStep leak(1 * MiB);
    std::vector<Strategy*> strategies;
    if (growth_case == GrowthCase::leak) strategies.push_back(&leak);
    const auto tokens = synthetic_corpus(kBatch * config.seq * kSteps + 1, 1);
    std::vector<std::int64_t> reserved, allocated;  // at each step's end
    std::unique_ptr<SequentialBatches> data;
    std::unique_ptr<Trainer> trainer;
    for (long s = 1; s <= kSteps; ++s) {
      // growing_sequence: T = 16, 32, ..., 320; the others T = 64 throughout.
      const std::size_t T = growth_case == GrowthCase::growing_sequence ? 16 * static_cast<std::size_t>(s) : config.seq;
      if (!trainer || growth_case == GrowthCase::growing_sequence) {
        trainer.reset();
        data = std::make_unique<SequentialBatches>(*device, tokens, kBatch, T);
        TrainerOptions topt;
        topt.batch = kBatch;
        topt.seq = T;
        trainer = std::make_unique<Trainer>(model, *data, topt, strategies, &optimizer);
      }
      const StepResult r = trainer->step();
      reserved.push_back(r.reserved_bytes);
      allocated.push_back(r.allocated_bytes);
    }
    // From step 3 (after warm-up) to the last step.
    state.counters["reserved_growth_bytes"] = bytes_counter(static_cast<double>(reserved.back() - reserved[2]));
    state.counters["allocated_at_step_end_growth_bytes"] =
        bytes_counter(static_cast<double>(allocated.back() - allocated[2]));
    state.counters["reserved_step3_bytes"] = bytes_counter(static_cast<double>(reserved[2]));
    state.counters["reserved_last_bytes"] = bytes_counter(static_cast<double>(reserved.back()));
  }
  state.SetLabel(growth_case == GrowthCase::no_leak ? "tiny T=64, nothing kept"
                 : growth_case == GrowthCase::leak  ? "tiny T=64, 1 MiB kept per step"
                                                    : "tiny T=16..320 (+16 per step), nothing kept");
}

// --- 5. growing sequence length at a fixed budget: where does each configuration run out?

void BM_GrowingSequence(benchmark::State& state, std::string config) {
  constexpr std::size_t kBudget = 128 * MiB, kBatch = 4, kStepT = 64, kMaxT = 1024;
  for (auto _ : state) {
    ModelConfig model_config = model_preset("tiny");
    model_config.seq = kMaxT;
    auto device = Device::open(options_for(config, kBudget));
    CachingAllocator& a = device->allocator();
    GPT model(*device, model_config, 1);
    AdamWOptimizer optimizer(model, kernels::AdamWHyper{}, 1.0f);
    const auto tokens = synthetic_corpus(kBatch * kMaxT * 2 + 1, 1);
    std::size_t last_trained = 0, oom_at = 0;
    std::int64_t inactive_split_peak = 0;
    for (std::size_t T = kStepT; T <= kMaxT; T += kStepT) {
      try {
        SequentialBatches data(*device, tokens, kBatch, T);
        TrainerOptions topt;
        topt.batch = kBatch;
        topt.seq = T;
        Trainer trainer(model, data, topt, {}, &optimizer);
        trainer.step();
        last_trained = T;
        inactive_split_peak = std::max(inactive_split_peak, a.stats().inactive_split_bytes[0].peak);
      } catch (const OutOfMemoryError&) {
        oom_at = T;
        break;
      }
    }
    const MemoryStats s = a.stats();
    set_memory_counters(state, s);
    state.counters["last_seq_trained"] = static_cast<double>(last_trained);
    state.counters["oom_at_seq"] = static_cast<double>(oom_at);
    state.counters["reserved_over_allocated_at_peak"] =
        static_cast<double>(s.reserved_bytes[0].peak) / static_cast<double>(s.allocated_bytes[0].peak);
    state.counters["inactive_split_peak_bytes"] = bytes_counter(static_cast<double>(inactive_split_peak));
    state.counters["num_alloc_retries"] = static_cast<double>(s.num_alloc_retries);
    state.counters["num_device_alloc"] = static_cast<double>(s.num_device_alloc);
    state.counters["num_device_free"] = static_cast<double>(s.num_device_free);
  }
  state.SetLabel("tiny C=64 L=2, B=4, T += 64 until OOM, budget 128 MiB, " + segments_name(config));
}

// --- 6. the synthetic fragmenting pattern, until out of memory on a simulated card

void BM_GrowingWithKeptTensors(benchmark::State& state, std::string config) {
  constexpr std::size_t kBudget = 256 * MiB;
  for (auto _ : state) {
    BudgetDeviceMemory card(kBudget, /*backed=*/false);
    CachingAllocator a(card, AllocatorConfig::parse(config));
    std::size_t steps = 0;
    std::int64_t inactive_split_at_oom = 0, allocated_at_oom = 0, reserved_at_oom = 0;
    for (std::size_t i = 0;; ++i) {
      try {
        void* activation = a.allocate((12 + 2 * i) * MiB, MemoryCategory::activations);
        a.allocate(2 * MiB, MemoryCategory::other);  // kept
        a.free(activation);
        steps = i + 1;
      } catch (const OutOfMemoryError&) {
        const MemoryStats s = a.stats();
        inactive_split_at_oom = s.inactive_split_bytes[0].current;
        allocated_at_oom = s.allocated_bytes[0].current;
        reserved_at_oom = s.reserved_bytes[0].current;
        break;
      }
    }
    const MemoryStats s = a.stats();
    state.counters["steps_before_oom"] = static_cast<double>(steps);
    state.counters["largest_activation_bytes"] = bytes_counter(static_cast<double>((12 + 2 * (steps - 1)) * MiB));
    state.counters["allocated_at_oom_bytes"] = bytes_counter(static_cast<double>(allocated_at_oom));
    state.counters["reserved_at_oom_bytes"] = bytes_counter(static_cast<double>(reserved_at_oom));
    state.counters["inactive_split_at_oom_bytes"] = bytes_counter(static_cast<double>(inactive_split_at_oom));
    state.counters["num_alloc_retries"] = static_cast<double>(s.num_alloc_retries);
    state.counters[std::string(result_schema::memory_peak_reserved)] = bytes_counter(static_cast<double>(s.reserved_bytes[0].peak));
  }
  state.SetLabel("simulated 256 MiB card, step i: alloc 12+2i MiB, keep 2 MiB, free, " + segments_name(config));
}

void register_benchmarks(bool gpu) {
  const std::vector<std::int64_t> sizes = {4 * static_cast<std::int64_t>(KiB), static_cast<std::int64_t>(MiB),
                                           16 * static_cast<std::int64_t>(MiB), 256 * static_cast<std::int64_t>(MiB)};
  struct AllocCase {
    const char* name;
    Mode mode;
    const char* config;
  };
  const AllocCase cases[] = {{"hit/fixed", Mode::hit, kFixed},       {"hit/expandable", Mode::hit, kExpandable},
                             {"miss/fixed", Mode::miss, kFixed},     {"miss/expandable", Mode::miss, kExpandable},
                             {"raw", Mode::raw, kRaw}};
  for (bool touch : {false, true}) {
    if (touch && gpu) continue;  // device memory is not the host's to write
    for (const AllocCase& c : cases) {
      std::string name = "BM_AllocFree/";
      name += c.name;
      if (touch) name += "/touch";
      benchmark::RegisterBenchmark(name.c_str(), BM_AllocFree, c.mode, std::string(c.config), touch)
          ->ArgsProduct({sizes})
          ->UseRealTime();
    }
  }
  for (const char* config : {kFixed, kExpandable, kRaw}) {
    const std::string name = "BM_LayerPattern/" + segments_name(config);
    benchmark::RegisterBenchmark(name.c_str(), BM_LayerPattern, std::string(config))->UseRealTime();
  }

  const ModelConfig model = gpu ? model_preset("gpt2-124m") : model_preset("small");
  const std::size_t batch = gpu ? 8 : 4;
  for (const char* config : {kFixed, kExpandable})
    for (const char* policy : {"never", "every-step", "every:4"}) {
      const std::string name = "BM_TrainEmptyCache/" + segments_name(config) + "/" + policy;
      benchmark::RegisterBenchmark(name.c_str(), BM_TrainEmptyCache, std::string(config), std::string(policy), model,
                                   batch)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }

  benchmark::RegisterBenchmark("BM_ReservedGrowth/no_leak", BM_ReservedGrowth, GrowthCase::no_leak)
      ->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
  benchmark::RegisterBenchmark("BM_ReservedGrowth/leak", BM_ReservedGrowth, GrowthCase::leak)
      ->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
  benchmark::RegisterBenchmark("BM_ReservedGrowth/growing_sequence", BM_ReservedGrowth, GrowthCase::growing_sequence)
      ->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

  for (const char* config : {kFixed, "max_split_size_mb:20", kExpandable}) {
    const std::string suffix = std::string(config).empty() ? "fixed" : segments_name(config);
    benchmark::RegisterBenchmark(("BM_GrowingSequence/" + suffix).c_str(), BM_GrowingSequence, std::string(config))
        ->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
    benchmark::RegisterBenchmark(("BM_GrowingWithKeptTensors/" + suffix).c_str(), BM_GrowingWithKeptTensors,
                                 std::string(config))
        ->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
  }
}

}  // namespace
}  // namespace trainmem::allocator

int main(int argc, char** argv) {
  return trainmem::benchmark_main(argc, argv, "bench_allocator", [](const std::string& device, bool gpu) {
    trainmem::allocator::g_device_choice = device;
    trainmem::allocator::register_benchmarks(gpu);
  });
}
