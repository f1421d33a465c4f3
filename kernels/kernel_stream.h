// Where a kernel runs. kernels/ depends on nothing else of trainmem: every op takes raw
// pointers, sizes and a Stream, and each op header dispatches to the CPU reference (cpu::) or the
// CUDA implementation (cuda::).
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>

namespace trainmem::kernels {

// meta: no kernel runs (the pointers have no memory behind them); every op returns at once.
enum class Backend { cpu, cuda, meta };

class KernelCostLog;  // kernels/kernel_cost.h

struct Stream {
  Backend backend = Backend::cpu;
  void* cuda_stream = nullptr;  // a cudaStream_t on the cuda backend; nullptr = the default stream
  KernelCostLog* costs = nullptr;  // where each call declares its cost (nullptr: nowhere)
};

inline constexpr Stream kCpuStream{};

[[noreturn]] inline void no_cuda_kernels(const char* op) {
  throw std::runtime_error(std::string(op) + ": trainmem was built without CUDA kernels");
}

}  // namespace trainmem::kernels

// Calls the CUDA version where it was compiled, else says it was not.
#if defined(TRAINMEM_WITH_CUDA) && TRAINMEM_WITH_CUDA
#define TRAINMEM_CUDA_KERNEL(name, call) call
#else
#define TRAINMEM_CUDA_KERNEL(name, call) ::trainmem::kernels::no_cuda_kernels(name)
#endif
