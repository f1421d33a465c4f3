// bench_collectives: the communicator's collectives, in the manner of nccl-tests.
//
//   mpirun -np 4 --oversubscribe build/ci/common/bench_collectives [--device=auto|cpu|cuda]
//          [--comm=auto|local|mpi|nccl] --benchmark_out=coll.json --benchmark_out_format=json
//   (without mpirun: a world of one, the local backend)
//
// One benchmark per collective, dtype and buffer size S (the whole buffer: 4 KiB ... 16 MiB).
// Counters, nccl-tests' columns:
//   bytes   S
//   algbw   S / time                       (bytes per second)
//   busbw   bytes this rank sends / time   (all-reduce 2S(N-1)/N, reduce-scatter and all-gather
//                                           S(N-1)/N, broadcast S at the root): nccl-tests' bus
//                                           bandwidth, comparable to the link's peak
//   wrong   elements that differ from the expected result, summed over ranks, checked once after
//           the timed loop (must be 0)
// The world size N is the context's trainmem.world_size (common/results/ranked_benchmark_main.h).
// Every rank runs the same fixed number of iterations: Google Benchmark would pick a count per
// process from its own timings, and ranks that disagree would wait for each other forever. Rank 0
// reports; the others print nothing.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/comm/communicator.h"
#include "common/device/device.h"
#include "common/device/device_ops.h"
#include "common/results/benchmark_context.h"
#include "common/results/ranked_benchmark_main.h"
#include "kernels/convert.h"

namespace trainmem {
namespace {

Device* g_device = nullptr;        // the main's (ranked_benchmark_main.h)
Communicator* g_comm = nullptr;
constexpr int kIterations = 10;

// Inputs whose sums are exact in every dtype for small N: rank r's element i is (r + 1) + i % 7.
float input_value(int rank, std::size_t i) { return static_cast<float>(rank + 1) + static_cast<float>(i % 7); }

std::vector<std::uint8_t> encode(const std::vector<float>& v, DType dtype) {
  std::vector<std::uint8_t> bytes(v.size() * dtype_size(dtype));
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::f32) {
      std::memcpy(&bytes[4 * i], &v[i], 4);
    } else {
      const std::uint16_t h =
          dtype == DType::bf16 ? kernels::cpu::float_to_bf16(v[i]) : kernels::cpu::float_to_fp16(v[i]);
      std::memcpy(&bytes[2 * i], &h, 2);
    }
  }
  return bytes;
}

std::vector<float> decode(const std::vector<std::uint8_t>& bytes, DType dtype) {
  const std::size_t n = bytes.size() / dtype_size(dtype);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (dtype == DType::f32) {
      std::memcpy(&v[i], &bytes[4 * i], 4);
    } else {
      std::uint16_t h = 0;
      std::memcpy(&h, &bytes[2 * i], 2);
      v[i] = dtype == DType::bf16 ? kernels::cpu::bf16_to_float(h) : kernels::cpu::fp16_to_float(h);
    }
  }
  return v;
}

// One collective on a whole buffer of (about) `bytes`: inputs, the call, and the expected output.
struct Case {
  Collective collective;
  DType dtype;
  std::size_t slice = 0;   // elements per rank for reduce-scatter / all-gather, else the buffer's
  std::size_t in_count = 0, out_count = 0;
  std::vector<float> input;     // this rank's
  std::vector<float> expected;  // this rank's result

  Case(Collective c, DType dt, std::size_t bytes, int rank, int n) : collective(c), dtype(dt) {
    const std::size_t elements = bytes / dtype_size(dt);
    const bool sliced = c == Collective::reduce_scatter || c == Collective::all_gather;
    slice = sliced ? elements / static_cast<std::size_t>(n) : elements;
    const std::size_t whole = sliced ? slice * static_cast<std::size_t>(n) : elements;
    in_count = c == Collective::all_gather ? slice : whole;
    out_count = c == Collective::reduce_scatter ? slice : whole;
    input.resize(in_count);
    for (std::size_t i = 0; i < in_count; ++i) input[i] = input_value(rank, i);
    expected.resize(out_count);
    for (std::size_t i = 0; i < out_count; ++i) {
      switch (c) {
        case Collective::all_reduce:  // sum over r of (r + 1) + i % 7
        case Collective::reduce_scatter: {
          const std::size_t global = c == Collective::reduce_scatter ? rank * slice + i : i;
          float sum = 0;
          for (int r = 0; r < n; ++r) sum += input_value(r, global);
          expected[i] = sum;
          break;
        }
        case Collective::all_gather: expected[i] = input_value(static_cast<int>(i / slice), i % slice); break;
        case Collective::broadcast: expected[i] = input_value(0, i); break;
        case Collective::barrier: break;
      }
    }
  }

  void run(void* in, void* out) const {
    switch (collective) {
      case Collective::all_reduce: g_comm->all_reduce(in, slice, dtype, MemoryCategory::gradients); break;
      case Collective::reduce_scatter: g_comm->reduce_scatter(in, out, slice, dtype, MemoryCategory::gradients); break;
      case Collective::all_gather: g_comm->all_gather(in, out, slice, dtype, MemoryCategory::parameters); break;
      case Collective::broadcast: g_comm->broadcast(in, slice, dtype, 0, MemoryCategory::parameters); break;
      case Collective::barrier: g_comm->barrier(); break;
    }
  }
  bool in_place() const { return collective == Collective::all_reduce || collective == Collective::broadcast; }
};

void BM_collective(benchmark::State& state, Collective c, DType dtype) {
  const Case k(c, dtype, static_cast<std::size_t>(state.range(0)), g_comm->rank(), g_comm->world_size());
  CachingAllocator& a = g_device->allocator();
  const std::size_t es = dtype_size(dtype);
  void* in = a.allocate(std::max<std::size_t>(k.in_count, k.out_count) * es, MemoryCategory::communication);
  void* out = k.in_place() ? in : a.allocate(k.out_count * es, MemoryCategory::communication);
  const auto input = encode(k.input, dtype);
  copy_host_to_device(*g_device, in, input.data(), input.size());

  g_comm->barrier();
  g_comm->reset_stats();
  for (auto _ : state) k.run(in, out);
  const CommCounts counts = g_comm->stats().by_collective[static_cast<std::size_t>(c)];

  // The check: fresh inputs, one call, every element compared.
  copy_host_to_device(*g_device, in, input.data(), input.size());
  k.run(in, out);
  std::vector<std::uint8_t> result(k.out_count * es);
  copy_device_to_host(*g_device, result.data(), out, result.size());
  const std::vector<float> got = decode(result, dtype);
  double wrong = 0;
  for (std::size_t i = 0; i < got.size(); ++i) wrong += got[i] != k.expected[i];
  wrong = g_comm->all_reduce_sum(wrong);
  if (out != in) a.free(out);
  a.free(in);

  const double S = static_cast<double>(counts.volume_bytes) / (c == Collective::all_reduce ? 2.0 : 1.0) /
                   static_cast<double>(counts.calls);
  state.counters["bytes"] = bytes_counter(S);
  state.counters["algbw"] = benchmark::Counter(S * static_cast<double>(counts.calls), benchmark::Counter::kIsRate,
                                               benchmark::Counter::kIs1024);
  state.counters["busbw"] = benchmark::Counter(static_cast<double>(counts.sent_bytes), benchmark::Counter::kIsRate,
                                               benchmark::Counter::kIs1024);
  state.counters["wrong"] = wrong;
  if (wrong > 0) state.SkipWithError("wrong results: see the 'wrong' counter");
}

void register_benchmarks() {
  const std::pair<Collective, const char*> collectives[] = {{Collective::all_reduce, "all_reduce"},
                                                            {Collective::reduce_scatter, "reduce_scatter"},
                                                            {Collective::all_gather, "all_gather"},
                                                            {Collective::broadcast, "broadcast"}};
  for (const auto& [c, name] : collectives)
    for (DType dtype : {DType::f32, DType::bf16}) {
      std::string label = name;
      label += '/';
      label += to_string(dtype);
      benchmark::RegisterBenchmark(label.c_str(), BM_collective, c, dtype)
          ->RangeMultiplier(4)
          ->Range(4 << 10, 16 << 20)
          ->Iterations(kIterations)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    }
}


}  // namespace
}  // namespace trainmem

int main(int argc, char** argv) {
  using namespace trainmem;
  RankedBenchmarkSettings settings;
  settings.device_memory = std::size_t{1} << 30;
  settings.comm_flag = true;  // the communicator is what it measures
  return ranked_benchmark_main(argc, argv, "bench_collectives", settings, [](BenchmarkWorld& w) {
    g_device = &w.device;
    g_comm = &w.world;
    register_benchmarks();
  });
}
