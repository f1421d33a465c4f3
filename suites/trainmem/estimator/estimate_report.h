// What `trainmem estimate` prints: a table for people, JSON for programs.
#pragma once
#include <cstddef>
#include <string>

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

// "4.25 MiB (4456448 B)"-style helpers shared by the CLI commands.
std::string bytes_and_gb(std::size_t bytes);  // "1.50 GiB (1.61 GB)"

}  // namespace trainmem::estimator
