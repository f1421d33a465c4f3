// --loader lazy: the dataset stays on the host; only the batches in flight are on the device.
//
// The tokens live in host memory (a memory-mapped .tok file, or the vector of synthetic data).
// With prefetch N >= 1, a background std::thread works ahead of training: for batch k it takes
// the B windows ShuffleOrder names, widens them to int32 inputs and targets in a host staging
// buffer (pinned with cudaHostAlloc on a GPU when `pinned` is on), and copies them into slot
// k % N of a ring of N device buffers (category `data`, 2 * round_size(4 * B * T) bytes each)
// on a copy stream of its own — while the main thread's step computes. next() waits for its
// slot, copies it device-to-device into the trainer's batch tensors and hands the slot back.
// On a GPU the copy stream is a non-blocking cudaStream, ordered against the compute stream by
// an event recorded after that device-to-device copy; on the CPU backend the worker's plain
// memcpy into the slot is the "transfer", done on the worker thread while the step runs.
//
// prefetch 0: no thread and no ring; next() assembles the batch in the staging buffer and
// copies it to the batch tensors synchronously (the baseline's way, with shuffling).
//
// Every batch's tokens are checked against the vocabulary as they are read (check_batch_tokens),
// and a mapped file is read through HostTokens::read_tokens: a file rewritten or cut short during
// the run is a DataError naming it, never a token outside the embedding or a SIGBUS.
//
// An exception in the worker (a bad read, a CUDA error, the test hook) is kept and rethrown by
// the next() that would have received that batch, on the main thread; destroying the loader at
// any point stops and joins the worker (it finishes at most the batch it is assembling).
#pragma once
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/data/batch_source.h"
#include "common/data/host_tokens.h"
#include "suites/lazy_loading/shuffle_order.h"
#include "suites/lazy_loading/transfer.h"

namespace trainmem::lazy_loading {

struct LazyLoaderOptions {
  std::size_t prefetch = 2;  // N device buffers in the ring; 0 = synchronous
  bool pinned = true;        // pinned staging memory (effective on a GPU only)
  std::uint64_t seed = 1;
  bool shuffle = true;
  std::size_t rank = 0, world = 1;  // data parallel: this rank's rows of each global batch (shuffle_order.h)
  // Called with the batch index before batch k is assembled, on the thread that assembles it
  // (the worker; the caller of next() when prefetch is 0). For tests: throw, or sleep.
  std::function<void(std::uint64_t)> before_assemble;
  std::size_t vocab = kEveryToken;  // each batch's tokens must be below it (check_batch_tokens)
};

class LazyLoader : public BatchSource {
 public:
  // Throws DataError when the dataset is smaller than one batch, OutOfMemoryError when the
  // ring does not fit on the device.
  LazyLoader(Device& device, HostTokens tokens, std::size_t B, std::size_t T, LazyLoaderOptions options = {});
  ~LazyLoader() override;
  LazyLoader(const LazyLoader&) = delete;
  LazyLoader& operator=(const LazyLoader&) = delete;

  void next(Tensor& tokens, Tensor& targets) override;

  std::size_t prefetch() const { return options_.prefetch; }
  bool pinned() const;  // staging memory really pinned (GPU and option on)
  std::uint64_t batches_served() const { return served_; }
  std::size_t batches_per_epoch() const { return batches_per_epoch_; }
  const HostTokens& host_tokens() const { return host_; }

 private:
  struct Slot {
    std::unique_ptr<HostStaging> staging;  // int32 tokens [B*T] then targets [B*T]
    Tensor tokens, targets;                // the ring buffer on the device (category data)
    std::unique_ptr<ComputeEvent> released;  // recorded after next() has copied out of it
  };

  std::int32_t* targets_after(std::int32_t* inputs) const;
  void assemble(ShuffleOrder& order, std::uint64_t k, std::int32_t* tokens, std::int32_t* targets);
  void worker_loop();
  void check_shape(const Tensor& tokens, const Tensor& targets) const;

  Device& device_;
  HostTokens host_;
  std::size_t B_, T_;
  LazyLoaderOptions options_;
  std::size_t batches_per_epoch_;
  std::uint64_t served_ = 0;

  // prefetch 0
  ShuffleOrder sync_order_;
  std::unique_ptr<HostStaging> sync_staging_;

  // prefetch >= 1
  std::vector<Slot> slots_;
  std::unique_ptr<CopyStream> copy_stream_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::uint64_t produced_ = 0;  // batches 0 .. produced_-1 are in their slots (guarded by mutex_)
  std::uint64_t released_ = 0;  // batches 0 .. released_-1 have been copied out (guarded by mutex_)
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread worker_;
};

}  // namespace trainmem::lazy_loading
