// The checks of --data, said once: `trainmem train` applies them to the tokens it loads
// (load_dataset, token_file.h) or maps; `trainmem estimate`, `max-batch` and `train --device meta`
// apply the same ones to the facts inspect_dataset reads without keeping the tokens.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace trainmem {

// What the checks need to know of a dataset.
struct DatasetFacts {
  std::uint64_t tokens = 0;     // how many
  std::uint16_t max_token = 0;  // the largest (0 when there are none)
};

// The facts of --data, in host memory that does not grow with the batch or the file:
//   synthetic   the corpus `train` makes for a run that needs `min_tokens` (synthetic_dataset_tokens;
//               its largest token is kSyntheticCorpusMaxToken), nothing generated
//   token file  its header's count; its tokens read through a fixed 1 MiB buffer
//   other file  its size (one token per byte); its bytes read through the same buffer
// The format is data_format's (token_file.h). Throws DataError for a file that cannot be read.
DatasetFacts inspect_dataset(const std::string& spec, std::size_t min_tokens);

// Throws DataError, naming --data and what to change, unless the dataset holds at least
// `min_tokens` (one global batch: tokens_for_batches) and every token is below `vocab`.
void check_dataset(const DatasetFacts& facts, const std::string& spec, std::size_t min_tokens, std::size_t vocab);

// The largest micro-batch B whose global batch (`ranks` x B rows of T tokens, plus the last
// target: tokens_for_batches) a dataset of `tokens` holds; 0 when not even B = 1.
std::size_t largest_batch_in(std::uint64_t tokens, std::size_t ranks, std::size_t T);

}  // namespace trainmem
