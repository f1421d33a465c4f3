// The GPU part of bench_flash_attention (registered from its main where CUDA is compiled and a
// GPU answers): attention_bench::gpu_shapes() (B*T = 16384, H*D = 2048, T = 512 ... 16384,
// D = 64 and 128, causal and not), forward and forward+backward, for
//   flash_v<N>_bf16   every kernels::cuda flash attention version (N = 1 .. versions()), bf16
//   flash_v<N>_fp16   the last (fastest) version, fp16
//   cudnn_bf16/_fp16  cuDNN's fused SDPA through cudnn-frontend (where compiled in)
//   naive_cuda_fp32   kernels::cuda::attention_forward/backward: fp32, cuBLAS GEMMs and the T x T
//                     scores and probabilities in memory (causal only, as that kernel is); shapes
//                     whose T x T buffers would exceed 20 GiB are skipped with the reason.
// Kernel time only: buffers come from cudaMalloc once per benchmark (not the allocator), inputs
// are random on the device, one untimed warm-up call (it also builds cuDNN's graph), then each
// iteration is timed with CUDA events on the benchmark's stream (UseManualTime).
#include <benchmark/benchmark.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>

#include "kernels/attention.h"
#include "kernels/cudnn_attention.h"
#include "kernels/flash_attention.h"
#include "suites/flash_attention/attention_bench_cases.h"

namespace trainmem::attention_bench {
namespace {

using kernels::AttentionShape;
using kernels::cuda::Half16;

constexpr double kNaiveLimitBytes = 20.0 * 1024 * 1024 * 1024;  // T x T buffers of the naive kernel

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

// One cudaMalloc'd buffer (RAII).
class DeviceMemory {
 public:
  explicit DeviceMemory(std::size_t bytes) {
    if (bytes > 0) check(cudaMalloc(&ptr_, bytes), "cudaMalloc");
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory() { cudaFree(ptr_); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
};

// Uniform in [-1, 1) from a hash of the index (splitmix64): random enough, and no host copy of
// the hundreds of MiB the largest shapes need.
__device__ __forceinline__ float uniform_at(std::size_t i, std::uint64_t seed) {
  std::uint64_t z = (static_cast<std::uint64_t>(i) + seed) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
}
__global__ void fill16_kernel(std::uint16_t* out, std::size_t n, std::uint64_t seed, bool bf16) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float x = uniform_at(i, seed);
    out[i] = bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(x)) : __half_as_ushort(__float2half_rn(x));
  }
}
__global__ void fill32_kernel(float* out, std::size_t n, std::uint64_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    out[i] = uniform_at(i, seed);
}
void fill(std::uint16_t* out, std::size_t n, std::uint64_t seed, Half16 dtype, cudaStream_t stream) {
  fill16_kernel<<<1024, 256, 0, stream>>>(out, n, seed, dtype == Half16::bf16);
  check(cudaGetLastError(), "fill16_kernel");
}
void fill(float* out, std::size_t n, std::uint64_t seed, cudaStream_t stream) {
  fill32_kernel<<<1024, 256, 0, stream>>>(out, n, seed);
  check(cudaGetLastError(), "fill32_kernel");
}

// A stream and two events for one benchmark.
class Timing {
 public:
  Timing() {
    check(cudaStreamCreate(&stream_), "cudaStreamCreate");
    check(cudaEventCreate(&start_), "cudaEventCreate");
    check(cudaEventCreate(&stop_), "cudaEventCreate");
  }
  Timing(const Timing&) = delete;
  Timing& operator=(const Timing&) = delete;
  ~Timing() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
    cudaStreamDestroy(stream_);
  }
  cudaStream_t stream() const { return stream_; }
  // Seconds that `work` takes on the stream.
  double time(const std::function<void()>& work) {
    check(cudaEventRecord(start_, stream_), "cudaEventRecord");
    work();
    check(cudaEventRecord(stop_, stream_), "cudaEventRecord");
    check(cudaEventSynchronize(stop_), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
    return ms / 1e3;
  }

 private:
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// Warm-up, then the timed loop; any failure ends the benchmark with its message.
void run_timed(benchmark::State& state, Timing& timing, const std::function<void()>& step) {
  try {
    step();  // warm-up (and cuDNN's graph build)
    check(cudaStreamSynchronize(timing.stream()), "cudaStreamSynchronize");
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  for (auto _ : state) {
    try {
      state.SetIterationTime(timing.time(step));
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
      break;
    }
  }
}

std::string label(const AttentionShape& s, const std::string& what) {
  return "B=" + std::to_string(s.B) + " H=" + std::to_string(s.H) + (what.empty() ? "" : " | " + what);
}

// What flash and cuDNN keep for the backward: out (16-bit) and lse (fp32).
double flash_saved_bytes(const AttentionShape& s) {
  return double(s.B) * double(s.T) * double(s.C()) * 2 + double(s.B) * double(s.H) * double(s.T) * 4;
}

// ------------------------------------------------------------------------------------ flash versions

void BM_FlashCuda(benchmark::State& state, int version, Half16 dtype, Pass pass, AttentionShape s) {
  std::size_t workspace = 0;
  try {
    Timing timing;
    const std::size_t n_qkv = s.B * s.T * s.qkv_width(), n_out = s.B * s.T * s.C(), n_lse = s.B * s.H * s.T;
    workspace = pass == Pass::forward ? 0 : kernels::cuda::flash_attention_backward_workspace_bytes(version, s);
    DeviceMemory qkv(n_qkv * 2), out(n_out * 2), lse(n_lse * 4), dout(n_out * 2), dqkv(n_qkv * 2), ws(workspace);
    fill(qkv.as<std::uint16_t>(), n_qkv, 1, dtype, timing.stream());
    fill(dout.as<std::uint16_t>(), n_out, 2, dtype, timing.stream());
    run_timed(state, timing, [&] {
      kernels::cuda::flash_attention_forward(timing.stream(), version, dtype, out.as<std::uint16_t>(),
                                             lse.as<float>(), qkv.as<std::uint16_t>(), s);
      if (pass == Pass::forward_backward)
        kernels::cuda::flash_attention_backward(timing.stream(), version, dtype, dqkv.as<std::uint16_t>(),
                                                dout.as<std::uint16_t>(), qkv.as<std::uint16_t>(),
                                                out.as<std::uint16_t>(), lse.as<float>(), ws.as<void>(), s);
    });
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  set_counters(state, s, pass, flash_saved_bytes(s), double(workspace));
  state.SetLabel(label(s, kernels::cuda::flash_attention_version_name(version)));
}

// ------------------------------------------------------------------------------------ cuDNN

#if defined(TRAINMEM_WITH_CUDNN_FRONTEND) && TRAINMEM_WITH_CUDNN_FRONTEND
void BM_CudnnSdpa(benchmark::State& state, Half16 dtype, Pass pass, AttentionShape s) {
  std::size_t workspace = 0;
  try {
    Timing timing;
    const std::size_t n_qkv = s.B * s.T * s.qkv_width(), n_out = s.B * s.T * s.C(), n_lse = s.B * s.H * s.T;
    workspace = kernels::cudnn::attention_forward_workspace_bytes(dtype, s);
    if (pass == Pass::forward_backward)
      workspace = std::max(workspace, kernels::cudnn::attention_backward_workspace_bytes(dtype, s));
    DeviceMemory qkv(n_qkv * 2), out(n_out * 2), lse(n_lse * 4), dout(n_out * 2), dqkv(n_qkv * 2), ws(workspace);
    fill(qkv.as<std::uint16_t>(), n_qkv, 1, dtype, timing.stream());
    fill(dout.as<std::uint16_t>(), n_out, 2, dtype, timing.stream());
    run_timed(state, timing, [&] {
      kernels::cudnn::attention_forward(timing.stream(), dtype, out.as<std::uint16_t>(), lse.as<float>(),
                                        qkv.as<std::uint16_t>(), ws.as<void>(), s);
      if (pass == Pass::forward_backward)
        kernels::cudnn::attention_backward(timing.stream(), dtype, dqkv.as<std::uint16_t>(), dout.as<std::uint16_t>(),
                                           qkv.as<std::uint16_t>(), out.as<std::uint16_t>(), lse.as<float>(),
                                           ws.as<void>(), s);
    });
  } catch (const kernels::cudnn::NotSupported& e) {
    state.SkipWithError((std::string("cuDNN does not support this case here: ") + e.what()).c_str());
    return;
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  set_counters(state, s, pass, flash_saved_bytes(s), double(workspace));
  state.SetLabel(label(s, kernels::cudnn::version()));
}
#endif

// ------------------------------------------------------------------------------------ naive fp32

// kernels::cuda::attention_*: preatt and att (B*H*T*T floats each) in the forward, and dscores
// (as many again: datt, then dpreatt in place) in the backward.
void BM_NaiveCuda(benchmark::State& state, Pass pass, AttentionShape s) {
  const double tt = double(s.B) * double(s.H) * double(s.T) * double(s.T) * 4;  // one T x T buffer, bytes
  const double needed = (pass == Pass::forward ? 2 : 3) * tt;
  if (needed > kNaiveLimitBytes) {
    state.SkipWithError(("naive attention skipped: its T x T buffers need " + std::to_string(static_cast<long long>(needed / (1u << 30))) +
                         " GiB (> 20 GiB)")
                            .c_str());
    return;
  }
  try {
    Timing timing;
    const std::size_t n_qkv = s.B * s.T * s.qkv_width(), n_out = s.B * s.T * s.C(), n_tt = s.B * s.H * s.T * s.T;
    DeviceMemory qkv(n_qkv * 4), out(n_out * 4), preatt(n_tt * 4), att(n_tt * 4), dout(n_out * 4),
        dqkv(pass == Pass::forward ? 0 : n_qkv * 4), dscores(pass == Pass::forward ? 0 : n_tt * 4);
    fill(qkv.as<float>(), n_qkv, 1, timing.stream());
    fill(dout.as<float>(), n_out, 2, timing.stream());
    run_timed(state, timing, [&] {
      kernels::cuda::attention_forward(timing.stream(), out.as<float>(), preatt.as<float>(), att.as<float>(),
                                       qkv.as<float>(), s.B, s.T, s.C(), s.H, s.kv_heads());
      if (pass == Pass::forward_backward)
        kernels::cuda::attention_backward(timing.stream(), dqkv.as<float>(), dscores.as<float>(), dout.as<float>(),
                                          qkv.as<float>(), att.as<float>(), s.B, s.T, s.C(), s.H, s.kv_heads());
    });
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  // Saved: the probabilities att. Workspace: preatt (forward); dscores, datt then dpreatt in place (backward).
  set_counters(state, s, pass, tt, tt);
  state.SetLabel(label(s, ""));
}

}  // namespace

void register_cuda_benchmarks() {
  const int versions = kernels::cuda::flash_attention_versions();
  for (Pass pass : {Pass::forward, Pass::forward_backward})
    for (const AttentionShape& s : gpu_shapes()) {
      auto add = [&](const std::string& impl, auto&&... args) {
        benchmark::RegisterBenchmark(name(impl, pass, s).c_str(), args..., pass, s)
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond);
      };
      for (int v = 1; v <= versions; ++v) add("flash_v" + std::to_string(v) + "_bf16", BM_FlashCuda, v, Half16::bf16);
      add("flash_v" + std::to_string(versions) + "_fp16", BM_FlashCuda, versions, Half16::fp16);
#if defined(TRAINMEM_WITH_CUDNN_FRONTEND) && TRAINMEM_WITH_CUDNN_FRONTEND
      add("cudnn_bf16", BM_CudnnSdpa, Half16::bf16);
      add("cudnn_fp16", BM_CudnnSdpa, Half16::fp16);
#endif
      if (s.causal) add("naive_cuda_fp32", BM_NaiveCuda);
    }
}

}  // namespace trainmem::attention_bench
