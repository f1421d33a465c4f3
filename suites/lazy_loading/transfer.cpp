#include "suites/lazy_loading/transfer.h"

#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#if defined(TRAINMEM_WITH_CUDA) && TRAINMEM_WITH_CUDA
#include <cuda_runtime.h>
#define LAZY_CUDA(call)                                                                            \
  do {                                                                                             \
    const cudaError_t status_ = (call);                                                            \
    if (status_ != cudaSuccess) throw std::runtime_error(std::string(#call) + ": " + cudaGetErrorString(status_)); \
  } while (0)
#endif

namespace trainmem::lazy_loading {

namespace {
bool on_gpu(const Device& device) { return device.kind() == DeviceKind::cuda; }

[[maybe_unused, noreturn]] void no_cuda() { throw DeviceError("trainmem was built without CUDA"); }
}  // namespace

HostStaging::HostStaging(Device& device, std::size_t bytes, bool pinned) : bytes_(bytes) {
  if (!device.computes()) {  // meta: no batch is assembled, so no host memory in proportion to one
    bytes_ = 0;
    return;
  }
  if (on_gpu(device) && pinned) {
#if defined(TRAINMEM_WITH_CUDA) && TRAINMEM_WITH_CUDA
    LAZY_CUDA(cudaHostAlloc(&data_, bytes == 0 ? 1 : bytes, cudaHostAllocDefault));
    pinned_ = true;
    return;
#else
    no_cuda();
#endif
  }
  data_ = ::operator new(bytes == 0 ? 1 : bytes);
}

HostStaging::~HostStaging() {
#if defined(TRAINMEM_WITH_CUDA) && TRAINMEM_WITH_CUDA
  if (pinned_) {
    cudaFreeHost(data_);
    return;
  }
#endif
  ::operator delete(data_);
}

CopyStream::CopyStream(Device& device) : device_(device) {
  if (!on_gpu(device_)) return;
#if defined(TRAINMEM_WITH_CUDA) && TRAINMEM_WITH_CUDA
  LAZY_CUDA(cudaSetDevice(device_.info().index));
  cudaStream_t s = nullptr;
  // Non-blocking: the legacy default stream (compute) does not serialize with it.
  LAZY_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  stream_ = s;
#else
  no_cuda();
#endif
}

CopyStream::~CopyStream() {
#if defined(TRAINMEM_WITH_CUDA) && TRAINMEM_WITH_CUDA
  if (stream_ != nullptr) {
    cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
    cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  }
#endif
}

void CopyStream::bind_thread() {
#if defined(TRAINMEM_WITH_CUDA) && TRAINMEM_WITH_CUDA
  if (stream_ != nullptr) LAZY_CUDA(cudaSetDevice(device_.info().index));
#endif
}

void CopyStream::copy_to_device_async(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0 || !device_.computes()) return;  // meta: no memory behind dst
  if (stream_ == nullptr) {
    std::memcpy(dst, src, bytes);  // CPU backend: the worker thread copies, overlapping the step
    return;
  }
#if defined(TRAINMEM_WITH_CUDA) && TRAINMEM_WITH_CUDA
  // Asynchronous only from pinned memory; from pageable memory the runtime stages it (slower).
  LAZY_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream_)));
#endif
}

void CopyStream::synchronize() {
#if defined(TRAINMEM_WITH_CUDA) && TRAINMEM_WITH_CUDA
  if (stream_ != nullptr) LAZY_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
#endif
}

void CopyStream::wait(void* event) {
#if defined(TRAINMEM_WITH_CUDA) && TRAINMEM_WITH_CUDA
  if (stream_ != nullptr && event != nullptr)
    LAZY_CUDA(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream_), static_cast<cudaEvent_t>(event), 0));
#else
  (void)event;
#endif
}

ComputeEvent::ComputeEvent(Device& device) : device_(device) {
  if (!on_gpu(device_)) return;
#if defined(TRAINMEM_WITH_CUDA) && TRAINMEM_WITH_CUDA
  cudaEvent_t e = nullptr;
  LAZY_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  event_ = e;
#else
  no_cuda();
#endif
}

ComputeEvent::~ComputeEvent() {
#if defined(TRAINMEM_WITH_CUDA) && TRAINMEM_WITH_CUDA
  if (event_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
#endif
}

void ComputeEvent::record() {
#if defined(TRAINMEM_WITH_CUDA) && TRAINMEM_WITH_CUDA
  if (event_ != nullptr) LAZY_CUDA(cudaEventRecord(static_cast<cudaEvent_t>(event_), nullptr));
#endif
}

}  // namespace trainmem::lazy_loading
