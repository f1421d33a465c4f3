// World size 1: a single process needs no MPI. Every collective is the identity (or a copy when
// the output buffer is not the input); the counts follow the same formulas as any backend (with
// N = 1 nothing is sent or received, the volume is still the buffer's size).
#pragma once
#include "common/comm/communicator.h"

namespace trainmem {

class LocalCommunicator : public Communicator {
 public:
  explicit LocalCommunicator(Device& device) : device_(device) {}

  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string backend() const override { return "local"; }

 protected:
  void do_all_reduce(void* buffer, std::size_t count, DType dtype) override;
  void do_reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype) override;
  void do_all_gather(const void* send, void* recv, std::size_t send_count, DType dtype) override;
  void do_broadcast(void* buffer, std::size_t count, DType dtype, int root) override;
  void do_barrier() override {}
  double do_all_reduce_host(double value, bool /*max*/) override { return value; }
  void wait_for_device() override;

 private:
  Device& device_;
};

}  // namespace trainmem
