#include "common/comm/local_communicator.h"

#include "common/device/device.h"
#include "common/device/device_ops.h"

namespace trainmem {

// The sum over one rank is the rank's own buffer (a 16-bit value widened and rounded once is
// itself), so there is nothing to do.
void LocalCommunicator::do_all_reduce(void*, std::size_t, DType) {}

// With one rank, slice 0 of the input is the whole result.
void LocalCommunicator::do_reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype) {
  if (send != recv) copy_device_to_device(device_, recv, send, recv_count * dtype_size(dtype));
}

void LocalCommunicator::do_all_gather(const void* send, void* recv, std::size_t send_count, DType dtype) {
  if (send != recv) copy_device_to_device(device_, recv, send, send_count * dtype_size(dtype));
}

void LocalCommunicator::do_broadcast(void*, std::size_t, DType, int) {}  // root is rank 0: checked by the caller

void LocalCommunicator::wait_for_device() { device_.synchronize(); }

}  // namespace trainmem
