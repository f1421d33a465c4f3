// The CUDA entry points of a build without CUDA (no nvcc at configure time): the CPU backend
// works as always, and asking for a GPU says why there is none.
#include "common/device/device.h"
#include "common/device/device_timer.h"

namespace trainmem {

namespace {
constexpr const char* kNoCuda = "trainmem was built without CUDA (no nvcc at configure time)";
}

bool cuda_compiled() { return false; }
std::optional<std::string> cuda_unavailable_reason() { return std::string(kNoCuda); }
std::optional<std::string> cuda_start_context(int) { return std::string(kNoCuda); }
int cuda_device_count() { return 0; }
DeviceInfo query_cuda_device_info(int) { throw DeviceError(kNoCuda); }
std::unique_ptr<DeviceMemory> make_cuda_device_memory(int, std::size_t) { throw DeviceError(kNoCuda); }
void cuda_synchronize() { throw DeviceError(kNoCuda); }
void* cuda_timing_event_create() { throw DeviceError(kNoCuda); }
void cuda_timing_event_destroy(void*) {}
void cuda_timing_event_record(void*, void*) { throw DeviceError(kNoCuda); }
double cuda_timing_seconds_between(void*, void*) { throw DeviceError(kNoCuda); }

}  // namespace trainmem
