// The largest micro-batch that fits a device, found by trying every batch from 1 up: what
// `trainmem estimate` reports (each try a meta run) and what `trainmem max-batch` finds (each try
// a real run), with the batches below it that do not fit (the "holes").
//
// Why every batch: fitting is not monotone in the micro-batch. The caching allocator rounds blocks
// and packs them into segments (2 MiB for small blocks, 20 MiB for mid-sized ones, a segment of
// its own for large ones), and releases its cache and retries before it fails; how well a step's
// tensors pack changes with their sizes, so a larger batch can fit where a smaller one does not
// (gpt2-124m on 16 GiB in bf16 with selective recompute: 34 fits, 35 and 36 do not, 37 and 38 do).
// A bisection or a gallop assumes monotonicity: it can miss the largest batch, or report one with
// batches below it that fail. This search assumes nothing of the allocator.
//
// Where it ends (the run of misses long enough to end it): peak *allocated* memory, the bytes of
// the live tensors before any segment is counted, does grow with B. A run makes the same
// allocations and frees in the same order at every B, and each tensor's size is nondecreasing in
// B; so if the tensors alive at some moment of the run at B exceed the device, they do at every
// larger B, and none of those fits. The search stops at the first such batch: the misses from the
// last batch that fits up to it are the ending run, as long as the allocator's overhead makes it
// (no fixed number of misses would prove anything: a hole is as wide as the rounding makes it).
//
// Cost: one try per batch up to the end (or `limit`); a meta run takes milliseconds, plus one
// unlimited meta run per miss to ask whether it is the end.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "common/train/training_setup.h"

namespace trainmem::estimator {

// What trying one micro-batch found.
struct BatchTry {
  bool fits = false;
  bool none_larger_fits = false;  // it does not fit, and no larger batch can (the end of the search)
};

struct BatchSearch {
  std::size_t largest = 0;          // the largest batch that fits (0: none, not even 1)
  std::vector<std::size_t> holes;   // the batches below `largest` that do not fit, in order
  std::size_t end = 0;              // the first batch proven past the end (0: none before `limit`)
  std::size_t limit = 0;            // the search tried no batch above this
  bool at_limit() const { return end == 0 && largest == limit; }  // a larger batch might fit too
};

// Tries B = 1, 2, ... up to `limit` (at least 1), stopping at the first try that says no larger batch fits.
BatchSearch search_batches(std::size_t limit, const std::function<BatchTry(std::size_t)>& try_batch);

// Whether no batch from setup.batch up can fit `capacity` bytes: the live tensors of its run on an
// unlimited meta device alone (peak allocated) exceed them (the argument above).
bool no_larger_batch_fits(const TrainingSetup& setup, std::size_t capacity);

// One try on the meta device of `capacity` bytes (the estimator's).
BatchTry try_on_meta(const TrainingSetup& setup, std::size_t capacity);

// The largest micro-batch in [1, limit] that fits `capacity` by meta runs, and its holes; the
// limit is at most what the data holds (data_batch_limit, memory_estimate.h).
BatchSearch search_batches_on_meta(TrainingSetup setup, std::size_t capacity, std::size_t limit);

// "35, 36 and 39" (empty: "").
std::string list_of_batches(const std::vector<std::size_t>& batches);

}  // namespace trainmem::estimator
