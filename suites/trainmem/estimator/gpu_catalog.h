// Named GPUs for `trainmem estimate --gpu NAME` and `trainmem max-batch --gpu NAME`: how much
// memory each card has, and its speeds (GpuSpeeds: the datasheets' peak rates, for predicting a
// step's time).
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

#include "common/tensor/dtype.h"

namespace trainmem::estimator {

// The CUDA context's share, taken off every card (an allowance: it varies with the driver and the
// libraries loaded).
constexpr std::size_t kCudaContextBytes = std::size_t{512} << 20;

// A card's peak speeds, as its vendor's datasheet states them, in decimal units as vendors give them
// (FLOP/s; bytes/s, 1 TB/s = 1e12). Every rate is DENSE: where a datasheet headlines the rate with
// 2:4 structured sparsity (twice the dense rate), the figure here is half of it. Peak rates: a
// real kernel reaches a fraction of them. gpu_catalog.cpp names each card's sources.
struct GpuSpeeds {
  double fp32_flops;            // dense FP32 on CUDA cores (non-tensor), FLOP/s (MI300X: AMD's matrix FP32)
  double tf32_flops;            // dense TF32 tensor-core FLOP/s (0 where the card has none)
  double bf16_flops;            // dense BF16 tensor-core FLOP/s with fp32 accumulation (0: no bf16 tensor cores, e.g. V100, T4)
  double fp16_flops;            // dense FP16 tensor-core FLOP/s with fp32 accumulation (GeForce: half the fp16-accumulate rate)
  double memory_bandwidth;      // device memory bytes/s (HBM/GDDR)
  double intra_node_bandwidth;  // bytes/s one GPU sends to its peers inside a node, one direction (NVLink where the card has it, else its PCIe link)
  double inter_node_bandwidth;  // bytes/s one GPU sends to other nodes, one direction, in the card's reference system (gpu_catalog.cpp names it)
  double pcie_bandwidth;        // host<->device bytes/s, one direction: the x16 link's theoretical rate after 128b/130b encoding
};

struct GpuSpec {
  std::string name;         // the flag's value, e.g. "h100-80gb": the nominal capacity in GB
  std::string description;  // e.g. "NVIDIA H100 80GB HBM3 (SXM)"
  std::size_t total_bytes;  // what the card reports
  GpuSpeeds speeds{};       // its peak speeds (all 0 where an entry gives none)

  std::size_t usable_bytes() const { return total_bytes - kCudaContextBytes; }
};

// The tensor-core (or best) dense rate for a storage dtype, FLOP/s: f32 -> fp32_flops (TF32 is off:
// trainmem keeps fp32 GEMMs reference-equal), bf16 -> bf16_flops (falls back to fp32_flops where
// 0: a card without bf16 tensor cores, V100 or T4, computes bf16 on its fp32 units), f16 ->
// fp16_flops (the same fall-back where 0). Throws std::invalid_argument for a dtype that is not
// floating point (i32, u16, i64).
double peak_flops(const GpuSpeeds& speeds, trainmem::DType dtype);

const std::vector<GpuSpec>& gpu_catalog();
// Throws std::invalid_argument listing the names when `name` is not in the catalog.
const GpuSpec& find_gpu(const std::string& name);
std::string gpu_names();  // "h100-80gb, a100-40gb, ..."

}  // namespace trainmem::estimator
