#include "suites/trainmem/planner/device_model.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace trainmem::planner {

namespace {

// Ring steps of a collective among N ranks (NCCL's ring algorithms; nccl-tests' PERFORMANCE.md).
double ring_steps(Collective c, int N) {
  const double n = std::max(1, N) - 1.0;
  return c == Collective::all_reduce ? 2.0 * n : c == Collective::barrier ? 0.0 : n;
}

DType storage_dtype_of(kernels::KernelDType t) {
  return t == kernels::KernelDType::bf16 ? DType::bf16 : t == kernels::KernelDType::f16 ? DType::f16 : DType::f32;
}

class GpuModel : public DeviceModel {
 public:
  GpuModel(estimator::GpuSpec gpu, int gpus_per_node, GpuEfficiency eff)
      : gpu_(std::move(gpu)), gpus_per_node_(std::max(1, gpus_per_node)), eff_(eff) {}

  std::string describe() const override {
    char text[256];
    std::snprintf(text, sizeof text, "%s: datasheet peaks x efficiency (gemm %.2f, attention %.2f, memory %.2f)",
                  gpu_.description.c_str(), eff_.gemm, eff_.attention, eff_.memory);
    return text;
  }

  double kernel_seconds(const kernels::KernelCall& call) const override {
    const double peak = estimator::peak_flops(gpu_.speeds, storage_dtype_of(call.dtype));
    const double eff = call.kind == kernels::KernelClass::gemm        ? eff_.gemm
                       : call.kind == kernels::KernelClass::attention ? eff_.attention
                                                                      : 1.0;
    const double compute = call.flops / (peak * eff);
    const double memory = call.bytes / (gpu_.speeds.memory_bandwidth * eff_.memory);
    return std::max(compute, memory) + eff_.launch_seconds;
  }
  // The host's work (ZeRO-Offload's Adam): bound by host memory; a server socket's ~100 GB/s.
  double host_seconds(const kernels::KernelCall& call) const override { return call.bytes / kHostBandwidth; }
  double copy_seconds(CopyDirection direction, double bytes) const override {
    if (direction == CopyDirection::device_to_device) return bytes / (gpu_.speeds.memory_bandwidth * eff_.memory);
    return bytes / gpu_.speeds.pcie_bandwidth;
  }
  double collective_seconds(Collective c, const CommCounts& call, int world_size) const override {
    const bool across_nodes = world_size > gpus_per_node_;
    const double link = across_nodes ? gpu_.speeds.inter_node_bandwidth : gpu_.speeds.intra_node_bandwidth;
    const double latency = across_nodes ? eff_.network_latency : eff_.collective_latency;
    return ring_steps(c, world_size) * latency + static_cast<double>(call.sent_bytes) / link;
  }
  bool overlaps_collectives() const override { return true; }

 private:
  static constexpr double kHostBandwidth = 100e9;
  estimator::GpuSpec gpu_;
  int gpus_per_node_;
  GpuEfficiency eff_;
};

class CpuModel : public DeviceModel {
 public:
  explicit CpuModel(Calibration c) : c_(std::move(c)) {}
  std::string describe() const override { return "this CPU, calibrated: " + c_.machine; }

  double kernel_seconds(const kernels::KernelCall& call) const override { return fitted("", call); }
  double host_seconds(const kernels::KernelCall& call) const override { return fitted("host:", call); }
  double copy_seconds(CopyDirection, double bytes) const override { return c_.copy.seconds(bytes); }
  double collective_seconds(Collective c, const CommCounts& call, int) const override {
    const auto it = c_.collectives.find(to_string(c));
    if (it == c_.collectives.end()) return 0;  // a world of one rank: nothing moves
    return it->second.seconds(static_cast<double>(call.sent_bytes));
  }
  // MPI on ranks that share the cores: a started gather makes progress when it is waited for.
  bool overlaps_collectives() const override { return false; }
  double micro_batch_overhead_seconds() const override { return c_.micro_batch_seconds; }

 private:
  double fitted(const std::string& prefix, const kernels::KernelCall& call) const {
    const double units = call.kind == kernels::KernelClass::memory ? call.bytes : call.flops;
    const std::string key = prefix + call.name + "/" + kernels::to_string(call.dtype);
    if (const auto it = c_.kernels.find(key); it != c_.kernels.end()) return it->second.seconds(units);
    const std::string kind = std::string(kernels::to_string(call.kind)) + "/" + kernels::to_string(call.dtype);
    if (const auto it = c_.classes.find(kind); it != c_.classes.end()) return it->second.seconds(units);
    return 0;
  }
  Calibration c_;
};

}  // namespace

std::unique_ptr<DeviceModel> gpu_model(const estimator::GpuSpec& gpu, int gpus_per_node, GpuEfficiency efficiency) {
  return std::make_unique<GpuModel>(gpu, gpus_per_node, efficiency);
}

std::unique_ptr<DeviceModel> cpu_model(Calibration calibration) {
  return std::make_unique<CpuModel>(std::move(calibration));
}

}  // namespace trainmem::planner
