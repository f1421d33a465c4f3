// The device a run uses: cpu, cuda or meta, what it is (recorded in every result), and the caching
// allocator that hands out its memory.
//
// meta (as PyTorch's meta device): the same code runs with every kernel and copy skipped, on an
// allocator backed by no memory, so a run's allocation sequence (every peak, segment and OOM
// point) comes out without computing anything. It follows the CPU backend's allocation pattern, or
// the CUDA backend's (--pattern cuda): where the backends differ is decided by cuda_pattern().
// Reads of device values on the host (the loss, the gradient norm) give zeros: a clean step.
#pragma once
#include <cstddef>
#include <iosfwd>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "common/allocator/allocator_config.h"
#include "common/allocator/caching_allocator.h"
#include "common/allocator/device_memory.h"
#include "common/allocator/host_device_memory.h"
#include "common/cli/enum_table.h"

namespace trainmem {

enum class DeviceKind { cpu, cuda, meta };
std::string to_string(DeviceKind kind);

// A device that was asked for and cannot be used (e.g. --device cuda on a machine without a GPU).
struct DeviceError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What the device is. Fields that do not apply are empty / 0 (e.g. sm_count on the CPU).
struct DeviceInfo {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;
  std::string name;                   // GPU name, or the CPU model on cpu
  std::size_t total_memory_bytes = 0;  // GPU memory, or host RAM on cpu
  std::size_t device_memory_bytes = 0;  // what the allocator may use: the card, or the --device-memory budget
  int sm_count = 0;
  std::string compute_capability;  // e.g. "9.0"
  std::string driver_version;      // CUDA driver API version, e.g. "13.0"
  std::string runtime_version;     // CUDA runtime, e.g. "13.0"
  std::string cudnn_version;       // e.g. "9.13.0", empty if cuDNN is absent
  std::string nccl_version;        // e.g. "2.27.7", empty if NCCL is absent
  std::string cpu_model;
  int cpu_cores = 0;               // logical cores of the host
  std::string cpu_gemm;            // the CPU GEMM library (kernels/cpu/blas_library.h), e.g. "oneMKL 2026.0.2, sequential"
  std::string cpu_gemm_kernels;    // its kernel family on this CPU, as it names it

  nlohmann::json to_json() const;
  std::string label() const;  // "cpu" or "cuda:0"
};

// --device auto|cpu|cuda|meta: auto picks cuda when a usable GPU answers, else cpu.
enum class DeviceChoice { automatic, cpu, cuda, meta };
inline constexpr auto kDeviceChoices = cli::enum_table<DeviceChoice>(
    "--device",
    {{DeviceChoice::automatic, "auto"}, {DeviceChoice::cpu, "cpu"}, {DeviceChoice::cuda, "cuda"}, {DeviceChoice::meta, "meta"}});
// --pattern cpu|cuda (meta only): whose allocation pattern the run follows.
inline constexpr auto kPatterns = cli::enum_table<DeviceKind>("--pattern", {{DeviceKind::cpu, "cpu"}, {DeviceKind::cuda, "cuda"}});

struct DeviceOptions {
  std::string choice = "auto";               // a name of kDeviceChoices
  std::optional<std::size_t> device_memory;  // --device-memory; default: 16 GiB on cpu, the card on cuda
  AllocatorConfig allocator;
  bool backed = true;  // cpu only: false gives a simulated device whose memory is never touched
  DeviceKind pattern = DeviceKind::cpu;  // meta only: --pattern
};

// Implemented with the CUDA runtime where trainmem was built with CUDA, by stubs otherwise.
bool cuda_compiled();
// nullopt: a GPU answered that this process may use. Makes no CUDA context (so it may be asked
// before a rank has chosen its GPU); cuda_start_context makes the first one, on the GPU given.
std::optional<std::string> cuda_unavailable_reason();
std::optional<std::string> cuda_start_context(int index);  // nullopt: made; else why not
int cuda_device_count();                                   // 0 without CUDA
// Which GPU this process uses: under mpirun, one rank per GPU by node-local rank (OpenMPI's
// OMPI_COMM_WORLD_LOCAL_RANK, MPICH's MPI_LOCALRANKID, Slurm's SLURM_LOCALID); ranks beyond the
// GPU count share them round-robin (e.g. 2 ranks on one GPU, which the MPI backend stages through
// the host). A single process uses GPU 0 (restrict it with CUDA_VISIBLE_DEVICES).
int cuda_device_for_this_process();
DeviceInfo query_cuda_device_info(int index);
std::unique_ptr<DeviceMemory> make_cuda_device_memory(int index, std::size_t budget_bytes /*0: the card*/);
void cuda_synchronize();

DeviceInfo query_cpu_device_info();

class CostLog;  // common/device/cost_log.h

class Device {
 public:
  // Resolves the choice (printing it to `log` when not null), opens the device and builds its
  // allocator. Throws DeviceError for --device cuda without a usable GPU or a bad choice.
  static std::unique_ptr<Device> open(const DeviceOptions& options, std::ostream* log = nullptr);
  ~Device();

  DeviceKind kind() const { return info_.kind; }
  // Whether kernels and copies really run (not on meta, whose memory is addresses only).
  bool computes() const { return kind() != DeviceKind::meta; }
  // Whether allocations follow the CUDA backend's pattern (its workspaces, its 16-bit matmuls)
  // rather than the CPU backend's: on cuda, and on meta with --pattern cuda. The code asks this,
  // never the device kind, wherever the two backends allocate differently; it asks computes()
  // before calling a kernel of its own.
  bool cuda_pattern() const { return kind() == DeviceKind::cuda || (kind() == DeviceKind::meta && cuda_pattern_); }
  const DeviceInfo& info() const { return info_; }
  CachingAllocator& allocator() { return *allocator_; }
  DeviceMemory& memory() { return *memory_; }
  void synchronize();
  // Where kernels and copies declare their costs (common/device/cost_log.h); nullptr: nowhere.
  CostLog* cost_log() const { return cost_log_; }
  void set_cost_log(CostLog* log) { cost_log_ = log; }

 private:
  Device() = default;
  DeviceInfo info_;
  CostLog* cost_log_ = nullptr;
  bool cuda_pattern_ = false;
  std::unique_ptr<DeviceMemory> memory_;
  std::unique_ptr<CachingAllocator> allocator_;
};

}  // namespace trainmem
