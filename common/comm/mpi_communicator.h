// MPI backend: CPU ranks, and several processes that share one GPU.
//
// On the CPU backend device buffers are host memory and go to MPI as they are. On a GPU they are
// staged: copied to host buffers, given to MPI, and the result copied back (OpenMPI from Debian
// is not CUDA-aware, and staging works with any MPI). The staging buffers are plain host memory,
// not the device's allocator: the communicator adds no device bytes.
//
// Sums are added in rank order in fp32 and rounded once (common/comm/rank_order_sum.h): the same
// bits on every rank, in every run and with every MPI, equal to the same sum made in one process.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "common/comm/communicator.h"
#include "common/comm/mpi_world.h"

namespace trainmem {

class MpiCommunicator : public Communicator {
 public:
  explicit MpiCommunicator(Device& device);  // starts MPI if needed; a duplicate of MPI_COMM_WORLD
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

 protected:
  void do_all_reduce(void* buffer, std::size_t count, DType dtype) override;
  void do_reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype) override;
  void do_all_gather(const void* send, void* recv, std::size_t send_count, DType dtype) override;
  void do_broadcast(void* buffer, std::size_t count, DType dtype, int root) override;
  void do_barrier() override;
  // CPU ranks: MPI_Iallgather (nullptr when staging a GPU: the synchronous call).
  std::unique_ptr<InFlight> do_start_all_gather(const void* send, void* recv, std::size_t send_count,
                                                DType dtype) override;
  double do_all_reduce_host(double value, bool max) override;
  void wait_for_device() override;

 private:
  // A host pointer holding `bytes` of the device buffer `p`: `p` itself on the CPU backend, else
  // a copy in `staging`.
  void* to_host(const void* p, std::size_t bytes, std::vector<std::byte>& staging, bool copy);
  void to_device(void* device_ptr, const void* host_ptr, std::size_t bytes);
  void reduce_pieces(const void* send, const std::vector<int>& pieces, const std::vector<int>& offsets, DType dtype,
                     void* mine);

  Device& device_;
  bool staged_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::vector<std::byte> staging_in_, staging_out_;
  std::vector<std::byte> blocks_, reduced_piece_;  // every rank's values of this rank's piece; its sum
  std::vector<float> wide_out_;
};

}  // namespace trainmem
