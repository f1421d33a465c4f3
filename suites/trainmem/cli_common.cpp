#include "suites/trainmem/cli_common.h"

#include "common/cli/enum_flag.h"
#include "common/util/byte_size.h"
#include "suites/trainmem/estimator/gpu_catalog.h"

namespace trainmem::cli {

namespace {
// "from 1MiB (1048576 bytes) to 4EiB (4611686018427387904 bytes)": the help and the message.
std::string device_memory_range() {
  return "from " + exact_byte_size(kMinDeviceMemory) + " (" + std::to_string(kMinDeviceMemory) + " bytes) to " +
         exact_byte_size(kMaxDeviceMemory) + " (" + std::to_string(kMaxDeviceMemory) + " bytes)";
}
}  // namespace

std::size_t parse_device_memory(const std::string& text) {
  const std::size_t bytes = parse_byte_size(text);
  if (bytes < kMinDeviceMemory || bytes > kMaxDeviceMemory)
    throw std::invalid_argument("must be " + device_memory_range() + ", not " + text);
  return bytes;
}

void add_memory_flags(CLI::App& command, DeviceFlags& flags) {
  command
      .add_option("--device-memory", flags.device_memory,
                  "Device memory to draw from, e.g. 16GiB, 80GB: the emulated card on cpu and in replay "
                  "(default 16GiB), a cap on the real card on cuda (default: all of it); " +
                      device_memory_range() + ". Units: " + byte_size_units())
      ->type_name("SIZE")
      ->check(parses_with(parse_device_memory));
  command
      .add_option("--allocator-config", flags.allocator_config,
                  "Allocator options, written as PYTORCH_CUDA_ALLOC_CONF: backend:" + kAllocatorBackends.choices() +
                      ", max_split_size_mb:N, expandable_segments:True|False (comma-separated)")
      ->type_name("STR")
      ->check(parses_with(AllocatorConfig::parse));
}

void add_device_flags(CLI::App& command, DeviceFlags& flags) {
  takes_one_of(command.add_option("--device", flags.device,
                                  "auto (a GPU if one answers, else the CPU), cpu, cuda, or meta (no memory and no "
                                  "kernels: the run's allocations only, as on the CPU backend)"),
               kDeviceChoices)
      ->capture_default_str();
  add_memory_flags(command, flags);
}

void add_pattern_flag(CLI::App& command, DeviceFlags& flags) {
  takes_one_of(command.add_option("--pattern", flags.pattern,
                                  "With --device meta: whose allocation pattern to follow, the CPU backend's (the "
                                  "default) or the CUDA backend's (its flash attention workspace, its gradient-norm "
                                  "accumulator)"),
               kPatterns);
}

void add_gpu_flag(CLI::App& command, std::string& gpu, const std::string& help) {
  command.add_option("--gpu", gpu, help + " (its memory as the card reports it, less " +
                                       exact_byte_size(estimator::kCudaContextBytes) +
                                       " for the CUDA context): " + estimator::gpu_names())
      ->type_name("NAME")
      ->check(parses_with([](const std::string& name) { estimator::find_gpu(name); }));
}

std::size_t DeviceFlags::device_memory_or(std::size_t fallback) const {
  return device_memory.empty() ? fallback : parse_device_memory(device_memory);
}

AllocatorConfig DeviceFlags::allocator() const { return AllocatorConfig::parse(allocator_config); }

DeviceKind DeviceFlags::backend() const {
  if (!pattern.empty()) return kPatterns.parse(pattern);
  if (device == "cuda") return DeviceKind::cuda;
  if (device == "cpu" || device == "meta") return DeviceKind::cpu;  // meta follows the CPU backend's allocations
  return cuda_unavailable_reason() ? DeviceKind::cpu : DeviceKind::cuda;
}

DeviceOptions DeviceFlags::to_options() const {
  DeviceOptions options;
  options.choice = device;
  if (!device_memory.empty()) options.device_memory = parse_device_memory(device_memory);
  options.allocator = allocator();
  if (!pattern.empty()) options.pattern = kPatterns.parse(pattern);
  if (!pattern.empty() && device != "meta")
    throw std::invalid_argument("--pattern " + pattern + " applies to --device meta (a real device follows its own pattern)");
  return options;
}

}  // namespace trainmem::cli
