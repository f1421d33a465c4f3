// The CUDA side of the device: is there a usable GPU, what is it, and its memory and events.
// Compiled only where trainmem is built with CUDA (cuda_backend_stub.cpp stands in otherwise).
#include <cuda.h>  // the driver API's types; its functions are looked up at run time (DriverApi)
#include <cuda_runtime.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "common/device/cuda_device_memory.h"
#include "common/device/device.h"
#include "common/device/device_timer.h"

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

// The driver API functions expandable segments need (virtual memory management). They are looked
// up through the runtime (cudaGetDriverEntryPointByVersion) rather than linked from libcuda, as
// PyTorch does too: a build with CUDA must still start, and skip its GPU tests, on a machine with
// no driver at all (CI), where libcuda.so.1 does not exist.
struct DriverApi {
  decltype(&::cuGetErrorString) cuGetErrorString = nullptr;
  decltype(&::cuDeviceGet) cuDeviceGet = nullptr;
  decltype(&::cuDeviceGetAttribute) cuDeviceGetAttribute = nullptr;
  decltype(&::cuMemGetAllocationGranularity) cuMemGetAllocationGranularity = nullptr;
  decltype(&::cuMemAddressReserve) cuMemAddressReserve = nullptr;
  decltype(&::cuMemAddressFree) cuMemAddressFree = nullptr;
  decltype(&::cuMemCreate) cuMemCreate = nullptr;
  decltype(&::cuMemRelease) cuMemRelease = nullptr;
  decltype(&::cuMemMap) cuMemMap = nullptr;
  decltype(&::cuMemUnmap) cuMemUnmap = nullptr;
  decltype(&::cuMemSetAccess) cuMemSetAccess = nullptr;
  bool loaded = false;  // every function was found
};

template <typename Function>
bool load_driver_function(const char* symbol, Function& function) {
  void* address = nullptr;
  cudaDriverEntryPointQueryResult found{};
  // 12000: the functions as the CUDA 12.0 driver API defines them (unchanged since 10.2).
  if (cudaGetDriverEntryPointByVersion(symbol, &address, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess || address == nullptr) {
    cudaGetLastError();
    return false;
  }
  function = reinterpret_cast<Function>(address);
  return true;
}

const DriverApi& driver_api() {
  static const DriverApi api = [] {
    DriverApi a;
    a.loaded = load_driver_function("cuGetErrorString", a.cuGetErrorString) &&
               load_driver_function("cuDeviceGet", a.cuDeviceGet) &&
               load_driver_function("cuDeviceGetAttribute", a.cuDeviceGetAttribute) &&
               load_driver_function("cuMemGetAllocationGranularity", a.cuMemGetAllocationGranularity) &&
               load_driver_function("cuMemAddressReserve", a.cuMemAddressReserve) &&
               load_driver_function("cuMemAddressFree", a.cuMemAddressFree) &&
               load_driver_function("cuMemCreate", a.cuMemCreate) &&
               load_driver_function("cuMemRelease", a.cuMemRelease) &&
               load_driver_function("cuMemMap", a.cuMemMap) &&
               load_driver_function("cuMemUnmap", a.cuMemUnmap) &&
               load_driver_function("cuMemSetAccess", a.cuMemSetAccess);
    return a;
  }();
  return api;
}

void check_driver(CUresult status, const char* what, const char* file, int line) {
  if (status != CUDA_SUCCESS) {
    const char* text = nullptr;
    if (driver_api().cuGetErrorString) driver_api().cuGetErrorString(status, &text);
    throw std::runtime_error(std::string(what) + " failed at " + file + ":" + std::to_string(line) + ": " +
                             (text ? text : "CUresult " + std::to_string(static_cast<int>(status))));
  }
}
#define TRAINMEM_CU_CHECK(call) check_driver((call), #call, __FILE__, __LINE__)

// Pages are ordinary device memory of this GPU.
CUmemAllocationProp page_properties(int cu_device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = cu_device;
  return prop;
}

std::string version_string(int major, int minor, int patch = -1) {
  std::string s = std::to_string(major) + "." + std::to_string(minor);
  if (patch >= 0) s += "." + std::to_string(patch);
  return s;
}

}  // namespace

bool cuda_compiled() { return true; }

// Answers without making a CUDA context: a context made here would be on the device current now
// (GPU 0, before a rank has chosen its own) and would stay for the life of the process, so every
// rank would hold memory on GPU 0. The context is made by cuda_start_context, on this process's
// own GPU. cudaGetDeviceCount and cudaDeviceGetAttribute ask the driver, not a context.
std::optional<std::string> cuda_unavailable_reason() {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    // A machine with no GPU either has no NVIDIA driver loaded (the runtime then says "CUDA driver
    // version is insufficient", which reads as if a driver needed updating) or a driver that
    // finds no device: both are "no GPU found". A loaded driver older than the runtime is not.
    const bool driver_loaded = std::ifstream("/proc/driver/nvidia/version").good();
    if (status == cudaErrorNoDevice || (status == cudaErrorInsufficientDriver && !driver_loaded))
      return std::string("no GPU found");
    if (status == cudaErrorInsufficientDriver)
      return "the NVIDIA driver is older than this CUDA runtime (" + std::to_string(CUDART_VERSION / 1000) + "." +
             std::to_string(CUDART_VERSION % 1000 / 10) + "): update the driver";
    return std::string(cudaGetErrorString(status));
  }
  if (count == 0) return std::string("no GPU found");
  const int index = cuda_device_for_this_process();
  int mode = cudaComputeModeDefault;
  status = cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, index);
  if (status != cudaSuccess) {
    cudaGetLastError();
    return std::string(cudaGetErrorString(status));
  }
  if (mode == cudaComputeModeProhibited)
    return "cuda:" + std::to_string(index) + " is in the Prohibited compute mode (nvidia-smi -c sets it)";
  return std::nullopt;
}

std::optional<std::string> cuda_start_context(int index) {
  // cudaSetDevice makes the device's primary context (CUDA 12 and later); cudaFree(nullptr) makes
  // it on older runtimes too. Either fails on a device that is listed but cannot be used (busy in
  // an exclusive compute mode, a broken driver).
  cudaError_t status = cudaSetDevice(index);
  if (status == cudaSuccess) status = cudaFree(nullptr);
  if (status != cudaSuccess) {
    cudaGetLastError();
    return "cuda:" + std::to_string(index) + ": " + cudaGetErrorString(status);
  }
  return std::nullopt;
}

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
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

  // Virtual memory management (expandable segments): the driver must offer it for this card.
  const DriverApi& api = driver_api();
  CUdevice device = 0;
  int supported = 0;
  if (api.loaded && api.cuDeviceGet(&device, device_index_) == CUDA_SUCCESS &&
      api.cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device) ==
          CUDA_SUCCESS &&
      supported) {
    cu_device_ = device;
    const CUmemAllocationProp page = page_properties(cu_device_);
    virtual_memory_ = api.cuMemGetAllocationGranularity(&granularity_, &page, CU_MEM_ALLOC_GRANULARITY_MINIMUM) ==
                          CUDA_SUCCESS &&
                      granularity_ > 0;
  }
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

// --- expandable segments: cuMemAddressReserve, then one cuMemCreate'd page at a time mapped in

void* CudaDeviceMemory::reserve_address_range(std::size_t bytes) {
  if (!virtual_memory_ || bytes % granularity_ != 0) return nullptr;
  TRAINMEM_CUDA_CHECK(cudaSetDevice(device_index_));  // driver calls act on the current context
  CUdeviceptr address = 0;
  if (driver_api().cuMemAddressReserve(&address, bytes, 0, 0, 0) != CUDA_SUCCESS) return nullptr;
  return reinterpret_cast<void*>(address);
}

void CudaDeviceMemory::release_address_range(void* ptr, std::size_t bytes) {
  TRAINMEM_CU_CHECK(driver_api().cuMemAddressFree(reinterpret_cast<CUdeviceptr>(ptr), bytes));
}

bool CudaDeviceMemory::map_pages(void* ptr, std::size_t bytes, std::size_t page_bytes) {
  if (!virtual_memory_ || page_bytes % granularity_ != 0 || bytes % page_bytes != 0)
    throw std::logic_error("CudaDeviceMemory::map_pages: pages must be whole multiples of the driver's granularity");
  if (budget_ != 0 && in_use_ + bytes > budget_) return false;  // the emulated smaller card is full
  TRAINMEM_CUDA_CHECK(cudaSetDevice(device_index_));
  const DriverApi& api = driver_api();
  const CUmemAllocationProp page = page_properties(cu_device_);
  CUmemAccessDesc access{};
  access.location = page.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  const auto start = reinterpret_cast<CUdeviceptr>(ptr);
  std::vector<CUdeviceptr> mapped;
  // All or nothing: on any failure, give back the pages this call mapped (and the page being
  // mapped), then answer "no room" (out of memory) or throw the driver's error (anything else).
  const auto give_back = [&](CUmemGenericAllocationHandle pending, bool pending_mapped, CUdeviceptr pending_address) {
    if (pending_mapped) api.cuMemUnmap(pending_address, page_bytes);
    if (pending != 0) api.cuMemRelease(pending);
    for (CUdeviceptr m : mapped) {
      api.cuMemUnmap(m, page_bytes);
      api.cuMemRelease(page_handles_.at(static_cast<std::uintptr_t>(m)));
      page_handles_.erase(static_cast<std::uintptr_t>(m));
    }
  };
  for (std::size_t offset = 0; offset < bytes; offset += page_bytes) {
    const CUdeviceptr address = start + offset;
    CUmemGenericAllocationHandle handle = 0;
    const CUresult created = api.cuMemCreate(&handle, page_bytes, &page, 0);
    if (created != CUDA_SUCCESS) {
      give_back(0, false, address);
      if (created == CUDA_ERROR_OUT_OF_MEMORY) return false;
      TRAINMEM_CU_CHECK(created);
    }
    const CUresult map_result = api.cuMemMap(address, page_bytes, 0, handle, 0);
    if (map_result != CUDA_SUCCESS) {
      give_back(handle, false, address);
      if (map_result == CUDA_ERROR_OUT_OF_MEMORY) return false;
      TRAINMEM_CU_CHECK(map_result);
    }
    const CUresult access_result = api.cuMemSetAccess(address, page_bytes, &access, 1);
    if (access_result != CUDA_SUCCESS) {
      give_back(handle, true, address);
      if (access_result == CUDA_ERROR_OUT_OF_MEMORY) return false;
      TRAINMEM_CU_CHECK(access_result);
    }
    page_handles_[static_cast<std::uintptr_t>(address)] = handle;
    mapped.push_back(address);
  }
  in_use_ += bytes;
  return true;
}

void CudaDeviceMemory::unmap_pages(void* ptr, std::size_t bytes, std::size_t page_bytes, StreamId stream) {
  // A freed block is handed out again at once for work on its stream, so kernels queued there may
  // still use these pages. cudaFree waits for them; cuMemUnmap does not: wait here.
  TRAINMEM_CUDA_CHECK(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream)));
  TRAINMEM_CUDA_CHECK(cudaSetDevice(device_index_));
  const DriverApi& api = driver_api();
  const auto start = reinterpret_cast<CUdeviceptr>(ptr);
  for (std::size_t offset = 0; offset < bytes; offset += page_bytes) {
    const auto address = static_cast<std::uintptr_t>(start + offset);
    const auto it = page_handles_.find(address);
    if (it == page_handles_.end()) throw std::logic_error("CudaDeviceMemory::unmap_pages: a page that is not mapped");
    TRAINMEM_CU_CHECK(api.cuMemUnmap(start + offset, page_bytes));
    TRAINMEM_CU_CHECK(api.cuMemRelease(it->second));
    page_handles_.erase(it);
  }
  in_use_ -= bytes;
}

void CudaDeviceMemory::synchronize_all_streams() {
  TRAINMEM_CUDA_CHECK(cudaSetDevice(device_index_));
  TRAINMEM_CUDA_CHECK(cudaDeviceSynchronize());
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

// DeviceTimer's events (common/device/device_timer.h): with timing, unlike the allocator's.
void* cuda_timing_event_create() {
  cudaEvent_t event = nullptr;
  TRAINMEM_CUDA_CHECK(cudaEventCreate(&event));
  return event;
}
void cuda_timing_event_destroy(void* event) { cudaEventDestroy(static_cast<cudaEvent_t>(event)); }
void cuda_timing_event_record(void* event, void* stream) {
  TRAINMEM_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)));
}
double cuda_timing_seconds_between(void* start, void* stop) {
  TRAINMEM_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(stop)));
  float ms = 0;
  TRAINMEM_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(stop)));
  return ms / 1e3;
}

}  // namespace trainmem
