#include "suites/trainmem/estimator/gpu_catalog.h"

#include <stdexcept>

namespace trainmem::estimator {

namespace {
constexpr std::size_t mib(std::size_t n) { return n << 20; }
}  // namespace

const std::vector<GpuSpec>& gpu_catalog() {
  static const std::vector<GpuSpec> catalog = {
      {"h100-80gb", "NVIDIA H100 80GB HBM3 (SXM)", mib(81559)},
      {"h200-141gb", "NVIDIA H200 141GB HBM3e", mib(143771)},
      {"a100-40gb", "NVIDIA A100 40GB", mib(40960)},
      {"a100-80gb", "NVIDIA A100 80GB", mib(81920)},
      {"l40s-48gb", "NVIDIA L40S 48GB", mib(46068)},
      {"l4-24gb", "NVIDIA L4 24GB", mib(23034)},
      {"rtx4090-24gb", "NVIDIA GeForce RTX 4090 24GB", mib(24564)},
      {"t4-16gb", "NVIDIA T4 16GB", mib(15360)},
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
    if (g.name == name) return g;
  throw std::invalid_argument("--gpu must be one of " + gpu_names() + " (or give --device-memory SIZE), not '" + name + "'");
}

}  // namespace trainmem::estimator
