// Named GPUs for `trainmem estimate --gpu NAME` and `trainmem max-batch --gpu NAME`: how much
// memory each card has.
//
// Capacities are the totals the cards report (nvidia-smi memory.total, rocm-smi's VRAM total), in
// MiB (2^20 bytes). The "NN GB" in a card's name is the vendor's nominal capacity, which the
// reported total never exceeds read as GiB: HBM and GDDR come in binary sizes, and ECC and the
// driver keep some of it (e.g. the A10's 24 GB reads 23028 MiB, 22.49 GiB). Not all of the total is
// the allocator's either: the CUDA context (driver, kernels' code, cuBLAS handles) takes a few
// hundred MiB that no allocator statistic shows (pytorch/pytorch#107667), so a card's usable
// memory is its total minus kCudaContextBytes (usable_bytes()).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace trainmem::estimator {

// The CUDA context's share, taken off every card (an allowance: it varies with the driver and the
// libraries loaded).
constexpr std::size_t kCudaContextBytes = std::size_t{512} << 20;

struct GpuSpec {
  std::string name;         // the flag's value, e.g. "h100-80gb": the nominal capacity in GB
  std::string description;  // e.g. "NVIDIA H100 80GB HBM3 (SXM)"
  std::size_t total_bytes;  // what the card reports

  std::size_t usable_bytes() const { return total_bytes - kCudaContextBytes; }
};

const std::vector<GpuSpec>& gpu_catalog();
// Throws std::invalid_argument listing the names when `name` is not in the catalog.
const GpuSpec& find_gpu(const std::string& name);
std::string gpu_names();  // "h100-80gb, a100-40gb, ..."

}  // namespace trainmem::estimator
