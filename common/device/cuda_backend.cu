// The CUDA side of the device: is there a usable GPU, what is it, and its memory and events.
// Compiled only where trainmem is built with CUDA (cuda_backend_stub.cpp stands in otherwise).
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "common/device/cuda_device_memory.h"
#include "common/device/device.h"

#ifdef TRAINMEM_WITH_CUDNN
#include <cudnn.h>
#endif
#ifdef TRAINMEM_WITH_NCCL
#include <nccl.h>
#endif

namespace trainmem {

namespace {

// Every CUDA call but the ones whose failure is an answer goes through this: an error is a bug
// or a broken machine, and says where it happened.
void check(cudaError_t status, const char* what, const char* file, int line) {
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear it so the next call is not blamed (a sticky error stays: the context is lost)
    throw std::runtime_error(std::string(what) + " failed at " + file + ":" + std::to_string(line) + ": " +
                             cudaGetErrorString(status));
  }
}
#define TRAINMEM_CUDA_CHECK(call) check((call), #call, __FILE__, __LINE__)

std::string version_string(int major, int minor, int patch = -1) {
  std::string s = std::to_string(major) + "." + std::to_string(minor);
  if (patch >= 0) s += "." + std::to_string(patch);
  return s;
}

}  // namespace

bool cuda_compiled() { return true; }

std::optional<std::string> cuda_unavailable_reason() {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    return std::string(cudaGetErrorString(status));
  }
  if (count == 0) return std::string("no CUDA device found");
  // A device can be listed and still be unusable (busy, wrong driver): make a context.
  status = cudaSetDevice(0);
  if (status == cudaSuccess) status = cudaFree(nullptr);
  if (status != cudaSuccess) {
    cudaGetLastError();
    return std::string(cudaGetErrorString(status));
  }
  return std::nullopt;
}

DeviceInfo query_cuda_device_info(int index) {
  DeviceInfo info = query_cpu_device_info();  // the host's model and cores
  cudaDeviceProp prop{};
  TRAINMEM_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  info.kind = DeviceKind::cuda;
  info.index = index;
  info.name = prop.name;
  info.total_memory_bytes = prop.totalGlobalMem;
  info.sm_count = prop.multiProcessorCount;
  info.compute_capability = version_string(prop.major, prop.minor);
  int driver = 0, runtime = 0;
  TRAINMEM_CUDA_CHECK(cudaDriverGetVersion(&driver));
  TRAINMEM_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  info.driver_version = version_string(driver / 1000, (driver % 1000) / 10);  // 13000 -> "13.0"
  info.runtime_version = version_string(runtime / 1000, (runtime % 1000) / 10);
#ifdef TRAINMEM_WITH_CUDNN
  const size_t cudnn = cudnnGetVersion();  // cuDNN 9: major*10000 + minor*100 + patch
  info.cudnn_version = version_string(static_cast<int>(cudnn / 10000), static_cast<int>((cudnn % 10000) / 100),
                                      static_cast<int>(cudnn % 100));
#endif
#ifdef TRAINMEM_WITH_NCCL
  int nccl = 0;  // NCCL >= 2.9: major*10000 + minor*100 + patch
  if (ncclGetVersion(&nccl) == ncclSuccess)
    info.nccl_version = version_string(nccl / 10000, (nccl % 10000) / 100, nccl % 100);
#endif
  return info;
}

// --- CudaDeviceMemory

CudaDeviceMemory::CudaDeviceMemory(int device_index, std::size_t budget_bytes)
    : device_index_(device_index), budget_(budget_bytes) {
  TRAINMEM_CUDA_CHECK(cudaSetDevice(device_index_));
  std::size_t free = 0;
  TRAINMEM_CUDA_CHECK(cudaMemGetInfo(&free, &card_total_));
  cudaDeviceProp prop{};
  TRAINMEM_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_index_));
  name_ = "cuda:" + std::to_string(device_index_) + " (" + prop.name + ")";
  if (budget_ > card_total_)
    throw DeviceError("--device-memory is larger than the card (" + std::to_string(card_total_) + " bytes)");
}

void* CudaDeviceMemory::allocate(std::size_t bytes) {
  if (budget_ != 0 && in_use_ + bytes > budget_) return nullptr;  // the emulated smaller card is full
  void* ptr = nullptr;
  const cudaError_t status = cudaMalloc(&ptr, bytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // an answer, not an error: the caller decides what to do
    return nullptr;
  }
  TRAINMEM_CUDA_CHECK(status);
  in_use_ += bytes;
  return ptr;
}

void CudaDeviceMemory::release(void* ptr, std::size_t bytes) {
  TRAINMEM_CUDA_CHECK(cudaFree(ptr));
  in_use_ -= bytes;
}

std::size_t CudaDeviceMemory::total_bytes() const { return budget_ != 0 ? budget_ : card_total_; }

std::size_t CudaDeviceMemory::free_bytes() const {
  std::size_t free = 0, total = 0;
  TRAINMEM_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  if (budget_ != 0) return std::min(free, budget_ - in_use_);
  return free;
}

EventHandle CudaDeviceMemory::record_event(StreamId stream) {
  cudaEvent_t event = nullptr;
  TRAINMEM_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  TRAINMEM_CUDA_CHECK(cudaEventRecord(event, reinterpret_cast<cudaStream_t>(stream)));
  return event;
}

bool CudaDeviceMemory::event_completed(EventHandle event) {
  const cudaError_t status = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (status == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  TRAINMEM_CUDA_CHECK(status);
  return true;
}

void CudaDeviceMemory::synchronize_event(EventHandle event) {
  TRAINMEM_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
}

void CudaDeviceMemory::destroy_event(EventHandle event) {
  TRAINMEM_CUDA_CHECK(cudaEventDestroy(static_cast<cudaEvent_t>(event)));
}

std::unique_ptr<DeviceMemory> make_cuda_device_memory(int index, std::size_t budget_bytes) {
  return std::make_unique<CudaDeviceMemory>(index, budget_bytes);
}

void cuda_synchronize() { TRAINMEM_CUDA_CHECK(cudaDeviceSynchronize()); }

}  // namespace trainmem
