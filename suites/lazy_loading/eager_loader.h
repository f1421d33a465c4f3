// --loader eager: the whole dataset on the device, as the guides' "bad" example does
// (data = torch.tensor(tokens).cuda(); x = data[i:i+T]).
//
// The tokens are uploaded once, widened to int32 (the dtype the model's embedding reads, and the
// one a device-to-device slice can be copied in without a conversion kernel), as one tensor of
// category `data`: round_size(4 * n) device bytes for n tokens. A batch is B device-to-device
// copies of a window's inputs and B of its targets (the window shifted by one) into the
// trainer's batch tensors, in the order ShuffleOrder gives. Under mpirun every rank holds the whole
// dataset (the guides' pattern, N times over) and copies out its own rows. The tokens are read
// once, at the upload (a mapped file through HostTokens::read_tokens, each chunk checked against
// the vocabulary): what the file does later cannot reach the device.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/data/batch_source.h"
#include "common/data/host_tokens.h"
#include "suites/lazy_loading/shuffle_order.h"

namespace trainmem::lazy_loading {

struct EagerLoaderOptions {
  std::uint64_t seed = 1;
  bool shuffle = true;
  std::size_t rank = 0, world = 1;  // data parallel: this rank's rows of each global batch (shuffle_order.h)
  std::size_t vocab = kEveryToken;  // the tokens must be below it, checked as they are uploaded (check_batch_tokens)
};

class EagerLoader : public BatchSource {
 public:
  // Throws DataError when the dataset is smaller than one batch, OutOfMemoryError when the
  // device cannot hold it.
  EagerLoader(Device& device, const HostTokens& tokens, std::size_t B, std::size_t T, EagerLoaderOptions options = {});

  void next(Tensor& tokens, Tensor& targets) override;

  const Tensor& dataset() const { return dataset_; }
  std::uint64_t batches_served() const { return served_; }
  std::size_t batches_per_epoch() const { return order_.batches_per_epoch(); }

 private:
  Device& device_;
  std::size_t B_, T_;
  ShuffleOrder order_;
  Tensor dataset_;  // int32 [n], category data
  std::vector<std::size_t> starts_;
  std::uint64_t served_ = 0;
};

}  // namespace trainmem::lazy_loading
