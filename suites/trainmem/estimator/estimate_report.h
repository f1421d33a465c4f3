// What `trainmem estimate` prints: a table for people, JSON for programs.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "suites/trainmem/estimator/memory_estimate.h"

namespace trainmem::estimator {

// The device the estimate was asked about.
struct EstimateTarget {
  std::string name;              // "h100-80gb", "--device-memory 24GiB", "cpu budget (default 16 GiB)"
  std::size_t total_bytes = 0;   // the card's (or budget's) size
  std::size_t usable_bytes = 0;  // what the allocator may take: total minus the CUDA context on a GPU
};

std::string estimate_table(const MemoryEstimate& estimate, const EstimateTarget& target);
nlohmann::json estimate_json(const MemoryEstimate& estimate, const EstimateTarget& target);

// The lines that give a search's answer (batch_search.h): the largest micro-batch that fits, the
// holes below it, and where the search ended; `tries` says what each try was ("meta runs").
std::string batch_search_lines(const BatchSearch& search, std::size_t data_max_batch, const std::string& tries);

// The OOM advisor's lines (oom_advice.h) under a heading ("" when there are none).
std::string advice_lines(const std::vector<std::string>& advice);

}  // namespace trainmem::estimator
