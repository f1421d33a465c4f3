#include "suites/trainmem/estimator/batch_search.h"

#include <algorithm>

#include "suites/trainmem/estimator/memory_estimate.h"
#include "suites/trainmem/estimator/meta_run.h"

namespace trainmem::estimator {

BatchSearch search_batches(std::size_t limit, const std::function<BatchTry(std::size_t)>& try_batch) {
  BatchSearch search;
  search.limit = std::max<std::size_t>(limit, 1);
  std::vector<std::size_t> misses;  // since the start: the holes, once a larger batch fits
  for (std::size_t b = 1; b <= search.limit; ++b) {
    const BatchTry t = try_batch(b);
    if (t.fits) {
      search.largest = b;
      search.holes.insert(search.holes.end(), misses.begin(), misses.end());
      misses.clear();
    } else if (t.none_larger_fits) {
      search.end = b;
      break;
    } else {
      misses.push_back(b);
    }
  }
  return search;
}

bool no_larger_batch_fits(const TrainingSetup& setup, std::size_t capacity) {
  return run_on_meta(setup, 0, 0, PeakMoment::skip).peak_allocated > capacity;
}

BatchTry try_on_meta(const TrainingSetup& setup, std::size_t capacity) {
  BatchTry t;
  t.fits = fits_on(setup, capacity);
  t.none_larger_fits = !t.fits && no_larger_batch_fits(setup, capacity);
  return t;
}

BatchSearch search_batches_on_meta(TrainingSetup setup, std::size_t capacity, std::size_t limit) {
  if (const std::size_t data_limit = data_batch_limit(setup)) limit = std::min(limit, data_limit);
  return search_batches(limit, [&](std::size_t b) {
    setup.batch = b;
    return try_on_meta(setup, capacity);
  });
}

std::string list_of_batches(const std::vector<std::size_t>& batches) {
  std::string out;
  for (std::size_t i = 0; i < batches.size(); ++i) {
    if (i > 0) out += i + 1 == batches.size() ? " and " : ", ";
    out += std::to_string(batches[i]);
  }
  return out;
}

}  // namespace trainmem::estimator
