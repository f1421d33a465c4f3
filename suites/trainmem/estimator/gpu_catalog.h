// Named GPUs for `trainmem estimate --gpu NAME`: how much memory each card has.
//
// Capacities are the totals the cards report (nvidia-smi memory.total, in MiB). Not all of it is
// the allocator's: the CUDA context (driver, kernels' code, cuBLAS handles) takes a few hundred
// MiB that no allocator statistic shows (pytorch/pytorch#107667), so the estimate counts a card's
// usable memory as its total minus kCudaContextBytes.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace trainmem::estimator {

struct GpuSpec {
  std::string name;         // the flag's value, e.g. "h100-80gb"
  std::string description;  // e.g. "NVIDIA H100 80GB HBM3 (SXM)"
  std::size_t total_bytes;  // what the card reports
};

// The CUDA context's share, taken off every card (an allowance: it varies with the driver and the
// libraries loaded).
constexpr std::size_t kCudaContextBytes = std::size_t{512} << 20;

const std::vector<GpuSpec>& gpu_catalog();
// Throws std::invalid_argument listing the names when `name` is not in the catalog.
const GpuSpec& find_gpu(const std::string& name);
std::string gpu_names();  // "h100-80gb, a100-40gb, ..."

}  // namespace trainmem::estimator
