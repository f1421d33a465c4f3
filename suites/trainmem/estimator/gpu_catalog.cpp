#include "suites/trainmem/estimator/gpu_catalog.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace trainmem::estimator {

namespace {
constexpr std::size_t mib(std::size_t n) { return n << 20; }

std::string lower_case(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}
}  // namespace

// Each total as the card reports it by default (see gpu_catalog.h): nvidia-smi's memory.total,
// rocm-smi's VRAM total.
const std::vector<GpuSpec>& gpu_catalog() {
  static const std::vector<GpuSpec> catalog = {
      {"h100-80gb", "NVIDIA H100 80GB HBM3 (SXM)", mib(81559)},
      {"h200-141gb", "NVIDIA H200 141GB HBM3e", mib(143771)},
      // The vendor's usable figure: 180 GB per GPU of its 192 GB of HBM3e (NVIDIA DGX B200 User
      // Guide, "Introduction to NVIDIA DGX B200 Systems": eight B200 GPUs with 1,440 GB of GPU
      // memory in total). The card reports 183359 MiB (179.06 GiB).
      {"b200-180gb", "NVIDIA B200 180GB HBM3e (192GB physical)", mib(183359)},
      {"a100-40gb", "NVIDIA A100 40GB", mib(40960)},
      {"a100-80gb", "NVIDIA A100 80GB", mib(81920)},
      {"v100-16gb", "NVIDIA Tesla V100 16GB HBM2", mib(16160)},
      {"v100-32gb", "NVIDIA Tesla V100 32GB HBM2", mib(32510)},
      {"a10-24gb", "NVIDIA A10 24GB GDDR6", mib(23028)},
      {"a10g-24gb", "NVIDIA A10G 24GB GDDR6 (AWS G5)", mib(23028)},
      {"l4-24gb", "NVIDIA L4 24GB", mib(23034)},
      {"l40s-48gb", "NVIDIA L40S 48GB", mib(46068)},
      {"t4-16gb", "NVIDIA T4 16GB", mib(15360)},
      {"rtx3090-24gb", "NVIDIA GeForce RTX 3090 24GB GDDR6X", mib(24576)},
      {"rtx4090-24gb", "NVIDIA GeForce RTX 4090 24GB", mib(24564)},
      {"rtxa6000-48gb", "NVIDIA RTX A6000 48GB GDDR6", mib(49140)},
      // AMD states 192 GB of HBM3; rocm-smi reports 206141652992 bytes. (trainmem runs CUDA only:
      // this sizes estimates; the context allowance stands in for ROCm's.)
      {"mi300x-192gb", "AMD Instinct MI300X 192GB HBM3", mib(196592)},
  };
  return catalog;
}

std::string gpu_names() {
  std::string names;
  for (const GpuSpec& g : gpu_catalog()) {
    if (!names.empty()) names += ", ";
    names += g.name;
  }
  return names;
}

const GpuSpec& find_gpu(const std::string& name) {
  for (const GpuSpec& g : gpu_catalog())
    if (g.name == lower_case(name)) return g;
  // (CLI11 puts "--gpu: " before this: the message does not name the flag again)
  throw std::invalid_argument("must be one of " + gpu_names() + " (any case; or give --device-memory SIZE), not '" +
                              name + "'");
}

}  // namespace trainmem::estimator
