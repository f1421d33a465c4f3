// A kernel's dynamic shared memory against what the device lets one block opt in to
// (cudaDevAttrMaxSharedMemoryPerBlockOptin: 227 KiB on sm_90, 163 KiB on sm_80, 99 KiB on
// sm_86/sm_89). Past that limit cudaFuncSetAttribute and the launch fail with a bare "invalid
// argument"; this message names the kernel, both sizes and the device instead. Host code only,
// no CUDA header: the CPU tests check the wording.
#pragma once
#include <cstddef>
#include <string>

namespace trainmem::kernels::cuda {

// "" when `bytes` fit under `optin_limit`; otherwise the error to report.
inline std::string shared_memory_refusal(const char* kernel, std::size_t bytes, std::size_t optin_limit, int device) {
  if (bytes <= optin_limit) return "";
  return std::string(kernel) + ": needs " + std::to_string(bytes) + " bytes of dynamic shared memory per block, " +
         "but CUDA device " + std::to_string(device) + " allows at most " + std::to_string(optin_limit) +
         " (cudaDevAttrMaxSharedMemoryPerBlockOptin); this kernel's tiles are too large for this GPU";
}

}  // namespace trainmem::kernels::cuda
