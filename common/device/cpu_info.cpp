// What the CPU is: model, cores, RAM, and the GEMM library trainmem runs on it. Recorded in every result run on the CPU backend (and, as
// the host, in GPU results too).
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

#include "common/device/device.h"
#include "kernels/cpu/blas_library.h"

namespace trainmem {

namespace {
std::string read_cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) {
        std::string model = line.substr(colon + 1);
        while (!model.empty() && model.front() == ' ') model.erase(model.begin());
        return model;
      }
    }
  }
  return "unknown CPU";
}
}  // namespace

DeviceInfo query_cpu_device_info() {
  DeviceInfo info;
  info.kind = DeviceKind::cpu;
  info.cpu_model = read_cpu_model();
  info.name = info.cpu_model;
  info.cpu_cores = static_cast<int>(std::thread::hardware_concurrency());
  const kernels::cpu::BlasLibrary gemm = kernels::cpu::blas_library();
  info.cpu_gemm = gemm.name;
  info.cpu_gemm_kernels = gemm.kernels;
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page_size > 0) info.total_memory_bytes = static_cast<std::size_t>(pages) * static_cast<std::size_t>(page_size);
  return info;
}

}  // namespace trainmem
