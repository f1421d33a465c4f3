#include "suites/lazy_loading/lazy_loader.h"

#include <stdexcept>
#include <string>

#include "common/device/device_ops.h"

namespace trainmem::lazy_loading {

LazyLoader::LazyLoader(Device& device, HostTokens tokens, std::size_t B, std::size_t T, LazyLoaderOptions options)
    : device_(device),
      host_(std::move(tokens)),
      B_(B),
      T_(T),
      options_(std::move(options)),
      batches_per_epoch_(0),
      sync_order_(host_.size(), B, T, options_.seed, options_.shuffle, options_.rank, options_.world) {
  batches_per_epoch_ = sync_order_.batches_per_epoch();
  const std::size_t batch_bytes = B_ * T_ * sizeof(std::int32_t);
  if (options_.prefetch == 0) {
    sync_staging_ = std::make_unique<HostStaging>(device_, 2 * batch_bytes, options_.pinned);
    return;
  }
  const auto b = static_cast<std::int64_t>(B_), t = static_cast<std::int64_t>(T_);
  slots_.resize(options_.prefetch);
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    s.staging = std::make_unique<HostStaging>(device_, 2 * batch_bytes, options_.pinned);
    s.tokens = Tensor(device_.allocator(), {b, t}, DType::i32, MemoryCategory::data,
                      "prefetch" + std::to_string(i) + ".tokens");
    s.targets = Tensor(device_.allocator(), {b, t}, DType::i32, MemoryCategory::data,
                       "prefetch" + std::to_string(i) + ".targets");
    s.released = std::make_unique<ComputeEvent>(device_);
  }
  copy_stream_ = std::make_unique<CopyStream>(device_);
  worker_ = std::thread([this] { worker_loop(); });  // last: everything it uses exists
}

LazyLoader::~LazyLoader() {
  if (worker_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  // copy_stream_'s destructor waits for copies in flight before the ring's tensors are freed.
  copy_stream_.reset();
}

bool LazyLoader::pinned() const {
  if (sync_staging_) return sync_staging_->pinned();
  return !slots_.empty() && slots_.front().staging->pinned();
}

// A staging buffer holds a batch's inputs, then its targets. On meta it has no memory (nullptr),
// and no pointer arithmetic on it is allowed either.
std::int32_t* LazyLoader::targets_after(std::int32_t* inputs) const {
  return inputs == nullptr ? nullptr : inputs + B_ * T_;
}

void LazyLoader::assemble(ShuffleOrder& order, std::uint64_t k, std::int32_t* tokens, std::int32_t* targets) {
  if (options_.before_assemble) options_.before_assemble(k);
  if (!device_.computes()) return;  // meta: the tokens have no values to read, the copies are skipped
  std::vector<std::size_t> starts(B_);
  order.row_starts(k, starts.data());
  host_.read_tokens([&](const std::uint16_t* data) {
    for (std::size_t b = 0; b < B_; ++b) slice_window(data, starts[b], T_, tokens + b * T_, targets + b * T_);
  });
  const std::string what = host_.name() + ", batch " + std::to_string(k);
  check_batch_tokens(tokens, B_ * T_, options_.vocab, what);
  check_batch_tokens(targets, B_ * T_, options_.vocab, what);
}

void LazyLoader::worker_loop() {
  ShuffleOrder order(host_.size(), B_, T_, options_.seed, options_.shuffle, options_.rank, options_.world);  // the worker's own
  const std::size_t N = slots_.size();
  const std::size_t batch_bytes = B_ * T_ * sizeof(std::int32_t);
  try {
    copy_stream_->bind_thread();
    for (std::uint64_t k = 0;; ++k) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return stop_ || k - released_ < N; });  // slot k % N is free
        if (stop_) return;
      }
      Slot& s = slots_[k % N];
      auto* host_tokens = static_cast<std::int32_t*>(s.staging->data());
      auto* host_targets = targets_after(host_tokens);
      assemble(order, k, host_tokens, host_targets);
      copy_stream_->wait(s.released->handle());  // GPU: the previous user of the slot has copied out
      copy_stream_->copy_to_device_async(s.tokens.data(), host_tokens, batch_bytes);
      copy_stream_->copy_to_device_async(s.targets.data(), host_targets, batch_bytes);
      copy_stream_->synchronize();  // landed; the staging buffer may be reused
      {
        std::lock_guard<std::mutex> lock(mutex_);
        produced_ = k + 1;
      }
      cv_.notify_all();
    }
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
    }
    cv_.notify_all();
  }
}

void LazyLoader::check_shape(const Tensor& tokens, const Tensor& targets) const {
  const std::size_t batch_bytes = B_ * T_ * sizeof(std::int32_t);
  if (tokens.nbytes() != batch_bytes || targets.nbytes() != batch_bytes)
    throw std::invalid_argument("LazyLoader::next: the batch tensors must be int32 [B, T] = [" + std::to_string(B_) +
                                ", " + std::to_string(T_) + "]");
}

void LazyLoader::next(Tensor& tokens, Tensor& targets) {
  check_shape(tokens, targets);
  const std::size_t batch_bytes = B_ * T_ * sizeof(std::int32_t);
  const std::uint64_t k = served_;
  if (options_.prefetch == 0) {
    auto* host_tokens = static_cast<std::int32_t*>(sync_staging_->data());
    auto* host_targets = targets_after(host_tokens);
    assemble(sync_order_, k, host_tokens, host_targets);
    copy_host_to_device(device_, tokens.data(), host_tokens, batch_bytes);
    copy_host_to_device(device_, targets.data(), host_targets, batch_bytes);
    ++served_;
    return;
  }
  {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return produced_ > k || error_ != nullptr; });
    if (produced_ <= k) std::rethrow_exception(error_);  // the worker failed on this batch
  }
  Slot& s = slots_[k % slots_.size()];
  copy_device_to_device(device_, tokens.data(), s.tokens.data(), batch_bytes);
  copy_device_to_device(device_, targets.data(), s.targets.data(), batch_bytes);
  s.released->record();  // GPU: the worker's next copy into this slot waits for this point
  {
    std::lock_guard<std::mutex> lock(mutex_);
    released_ = k + 1;
  }
  cv_.notify_all();
  ++served_;
}

}  // namespace trainmem::lazy_loading
