// A tiny program for test_communicator_failure: two ranks under mpirun, where rank 1 fails in
// one of several ways while rank 0 waits for it in a collective. The test checks that the job
// ends quickly, non-zero, with a message naming rank 1 and the cause.
//
//   comm_failure_helper throw      rank 1 throws (caught in main -> abort_world), as trainmem does
//   comm_failure_helper uncaught   rank 1 throws and nobody catches (the terminate handler)
//   comm_failure_helper early      rank 1 fails before MPI has started (a bad flag)
//   comm_failure_helper ok         nobody fails: exit 0 (the control)
#include <iostream>
#include <stdexcept>
#include <string>

#include "common/comm/communicator.h"
#include "common/device/device.h"

namespace {

int run(const std::string& mode) {
  using namespace trainmem;
  const char* env_rank = std::getenv("OMPI_COMM_WORLD_RANK");
  const bool rank1 = env_rank && std::string(env_rank) == "1";
  if (mode == "early" && rank1) throw std::invalid_argument("bad configuration: --zero 5 (simulated)");

  DeviceOptions options;
  options.choice = "cpu";
  options.device_memory = std::size_t{16} << 20;
  auto device = Device::open(options);
  auto comm = make_communicator(*device);
  float x = 1.0f;
  if (comm->rank() == 1 && mode != "ok")
    throw std::runtime_error("out of memory: tried to allocate 2.00 GiB (simulated)");
  comm->all_reduce(&x, 1, DType::f32, MemoryCategory::other);  // rank 0 waits here for rank 1
  if (x != static_cast<float>(comm->world_size())) throw std::runtime_error("wrong all_reduce result");
  std::cout << "rank " << comm->rank() << ": ok\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "ok";
  if (mode != "early") trainmem::init_mpi_if_launched();
  if (mode == "uncaught") return run(mode);  // an exception escapes main: std::terminate
  try {
    return run(mode);
  } catch (const std::exception& e) {
    trainmem::abort_world(e.what(), 1);
  }
}
