// Rank r of a world of N ranks that do not exist: the communicator of a meta run
// (common/device/device.h), so that one rank's real sharding strategy (ZeRO, FSDP) runs on the meta
// device and allocates exactly what it would under `mpirun -np N`.
//
// A collective moves nothing (the buffers have no memory behind them) but is counted as any
// backend counts it (communicator.h: volume and sent bytes by collective and category), so a
// meta run also says how many bytes a step communicates. Host scalars are the values every rank
// would give, taken to be equal on every rank (a clean step on the meta device):
//   all_reduce_sum(x) = N * x,   all_reduce_max(x) = x
#pragma once
#include "common/comm/communicator.h"

namespace trainmem {

class MetaCommunicator : public Communicator {
 public:
  // Throws std::invalid_argument unless 0 <= rank < world_size.
  MetaCommunicator(int rank, int world_size);

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string backend() const override { return "meta"; }

 protected:
  void do_all_reduce(void*, std::size_t, DType) override {}
  void do_reduce_scatter(const void*, void*, std::size_t, DType) override {}
  void do_all_gather(const void*, void*, std::size_t, DType) override {}
  void do_broadcast(void*, std::size_t, DType, int) override {}
  void do_barrier() override {}
  // Started and done at once (nothing moves), but started as the GPU's backend starts it, so that
  // a cost log sees the gather a run overlaps with compute (FSDP's prefetch) as asynchronous.
  std::unique_ptr<InFlight> do_start_all_gather(const void*, void*, std::size_t, DType) override;
  double do_all_reduce_host(double value, bool max) override { return max ? value : value * world_size_; }

 private:
  int rank_;
  int world_size_;
};

}  // namespace trainmem
