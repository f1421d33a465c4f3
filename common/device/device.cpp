// Device selection (--device auto|cpu|cuda), the device description recorded in results, and the
// order in which a device's parts are built and torn down.
#include "common/device/device.h"

#include <cstdlib>
#include <ostream>

#include <nlohmann/json.hpp>

#include "common/util/byte_size.h"

namespace trainmem {

std::string to_string(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::cuda: return "cuda";
    case DeviceKind::meta: return "meta";
    default: return "cpu";
  }
}

std::string DeviceInfo::label() const {
  return kind == DeviceKind::cuda ? "cuda:" + std::to_string(index) : to_string(kind);
}

nlohmann::json DeviceInfo::to_json() const {
  return {{"kind", to_string(kind)},
          {"label", label()},
          {"index", index},
          {"name", name},
          {"total_memory_bytes", total_memory_bytes},
          {"device_memory_bytes", device_memory_bytes},
          {"sm_count", sm_count},
          {"compute_capability", compute_capability},
          {"driver_version", driver_version},
          {"runtime_version", runtime_version},
          {"cudnn_version", cudnn_version},
          {"nccl_version", nccl_version},
          {"cpu_model", cpu_model},
          {"cpu_cores", cpu_cores},
          {"cpu_gemm", cpu_gemm},
          {"cpu_gemm_kernels", cpu_gemm_kernels}};
}

int cuda_device_for_this_process() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    const char* value = std::getenv(name);
    if (value == nullptr) continue;
    const int local_rank = std::atoi(value);
    const int count = cuda_device_count();
    return count > 0 && local_rank >= 0 ? local_rank % count : 0;
  }
  return 0;
}

namespace {
// The choice `name` names; DeviceError for a name that is none of them.
DeviceChoice device_choice(const std::string& name) {
  try {
    return kDeviceChoices.parse(name);
  } catch (const std::invalid_argument& e) {
    throw DeviceError(e.what());
  }
}
}  // namespace

std::unique_ptr<Device> Device::open(const DeviceOptions& options, std::ostream* log) {
  const DeviceChoice choice = device_choice(options.choice);

  // auto = cuda if a usable GPU answers, else cpu; the reason for cpu is printed.
  const bool asks_gpu = choice == DeviceChoice::automatic || choice == DeviceChoice::cuda;
  std::optional<std::string> no_cuda = asks_gpu ? cuda_unavailable_reason() : std::nullopt;
  // This process's first CUDA context, on its own GPU (a rank's, under mpirun), never on GPU 0 first.
  const int gpu = asks_gpu && !no_cuda ? cuda_device_for_this_process() : 0;
  if (asks_gpu && !no_cuda) no_cuda = cuda_start_context(gpu);
  DeviceKind kind = DeviceKind::cpu;
  if (options.pattern == DeviceKind::meta) throw DeviceError("--pattern must be cpu or cuda");
  if (options.pattern == DeviceKind::cuda && choice != DeviceChoice::meta)
    throw DeviceError("--pattern cuda applies to --device meta (a real device follows its own pattern)");
  if (choice == DeviceChoice::meta) {
    kind = DeviceKind::meta;
  } else if (choice == DeviceChoice::cuda) {
    if (no_cuda) throw DeviceError("--device cuda: no usable CUDA device (" + *no_cuda + "); use --device cpu or --device auto");
    kind = DeviceKind::cuda;
  } else if (choice == DeviceChoice::automatic && !no_cuda) {
    kind = DeviceKind::cuda;
  }

  std::unique_ptr<Device> device(new Device());
  device->cuda_pattern_ = kind == DeviceKind::meta && options.pattern == DeviceKind::cuda;
  if (kind == DeviceKind::cuda) {
    device->memory_ = make_cuda_device_memory(gpu, options.device_memory.value_or(0));
    device->info_ = query_cuda_device_info(gpu);
  } else {
    // meta: a budget with no memory behind it (addresses only), as a trace replay uses.
    const bool backed = kind == DeviceKind::cpu && options.backed;
    device->memory_ = std::make_unique<BudgetDeviceMemory>(options.device_memory.value_or(kDefaultDeviceMemory), backed);
    device->info_ = query_cpu_device_info();
    device->info_.kind = kind;
  }
  device->info_.device_memory_bytes = device->memory_->total_bytes();
  device->allocator_ = std::make_unique<CachingAllocator>(*device->memory_, options.allocator);

  // One line that says which device was taken and, for auto falling back to cpu, why.
  //   device: cuda:0 (NVIDIA H100 80GB HBM3, 79.19 GiB)
  //   device: cpu (auto: no GPU found) with a 16.00 GiB device-memory budget (or auto: <why not>)
  if (log) {
    const DeviceInfo& i = device->info_;
    if (kind == DeviceKind::cuda) {
      *log << "device: " << i.label() << " (" << i.name << ", " << format_bytes(i.device_memory_bytes) << ")\n";
    } else if (kind == DeviceKind::meta) {
      *log << "device: meta (no memory, no kernels: the allocation sequence only, the "
           << (device->cuda_pattern_ ? "CUDA" : "CPU") << " backend's pattern) with a "
           << format_bytes(i.device_memory_bytes) << " device-memory budget\n";
    } else {
      const std::string why =
          choice == DeviceChoice::automatic ? "auto: " + no_cuda.value_or("") : std::string("chosen");
      *log << "device: cpu (" << why << ") with a " << format_bytes(i.device_memory_bytes)
           << " device-memory budget\n";
    }
  }
  return device;
}

Device::~Device() {
  allocator_.reset();  // the allocator gives its segments back to the memory, so it goes first
  memory_.reset();
}

void Device::synchronize() {
  if (kind() == DeviceKind::cuda) cuda_synchronize();
}

}  // namespace trainmem
