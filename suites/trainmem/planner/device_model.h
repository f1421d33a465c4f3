// How long a step's work takes on a device: the device model that turns a meta run's declared
// costs (common/device/cost_log.h) into time, for `trainmem plan`.
//
// A GPU (gpu_model): the roofline of each kernel at the card's datasheet figures
// (estimator/gpu_catalog.h) times an efficiency per kind of work, plus a launch:
//   t(kernel)     = max(flops / (peak(dtype) * eff(class)), bytes / (bandwidth * eff_memory)) + launch
//   t(collective) = steps * latency + sent_bytes / link     (ring: nccl-tests' bus bandwidth;
//                   all-reduce 2(N-1) steps, reduce-scatter and all-gather N-1; inside a node the
//                   link is NVLink (or PCIe), across nodes each GPU's share of the network)
//   t(copy)       = bytes / PCIe;   t(host work) = bytes / host memory bandwidth
// The CPU (cpu_model): every kernel's time from a calibration of this machine (calibration.h):
//   t(kernel) = curve(name, dtype)(units)      (time_curve.h: measured calls' medians per size class)
// with units the flops of GEMM-like kernels and the bytes of the rest, measured on real runs.
#pragma once
#include <memory>
#include <string>

#include "common/comm/communicator.h"
#include "common/device/cost_log.h"
#include "suites/trainmem/estimator/gpu_catalog.h"
#include "suites/trainmem/planner/calibration.h"

namespace trainmem::planner {

class DeviceModel {
 public:
  virtual ~DeviceModel() = default;
  virtual std::string describe() const = 0;
  virtual double kernel_seconds(const kernels::KernelCall& call) const = 0;
  virtual double host_seconds(const kernels::KernelCall& call) const = 0;
  virtual double copy_seconds(CopyDirection direction, double bytes) const = 0;
  // One collective as rank r sees it (call: its bytes, communicator.h) among world_size ranks.
  virtual double collective_seconds(Collective c, const CommCounts& call, int world_size) const = 0;
  // Whether a collective started asynchronously runs beside the kernels (NCCL's own stream) or
  // effectively when it is waited for (MPI on CPU ranks that share the cores).
  virtual bool overlaps_collectives() const = 0;
  // What a step costs beyond its timed parts (the host's loop, the allocator), per micro-batch.
  virtual double micro_batch_overhead_seconds() const { return 0; }
};

// The efficiencies of a GPU model: what fraction of the datasheet's peak each kind of work
// reaches. Defaults from the anchors (cuBLAS bf16 GEMMs reach 600-750 of the H100's 989 TFLOP/s;
// FlashAttention-2 about 35% of peak, cuDNN's SDPA 30-50%; STREAM-like copies ~90% of bandwidth),
// until the GPU issue measures trainmem's own kernels.
struct GpuEfficiency {
  double gemm = 0.68;
  double attention = 0.35;
  double memory = 0.85;
  double launch_seconds = 5e-6;     // a kernel launch on the default stream
  double collective_latency = 8e-6; // per ring step (NCCL, NVLink)
  double network_latency = 20e-6;   // per ring step across nodes
};

std::unique_ptr<DeviceModel> gpu_model(const estimator::GpuSpec& gpu, int gpus_per_node,
                                       GpuEfficiency efficiency = {});
std::unique_ptr<DeviceModel> cpu_model(Calibration calibration);

}  // namespace trainmem::planner
