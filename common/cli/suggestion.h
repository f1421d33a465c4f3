// "did you mean --model?": the known names nearest to a word that is none of them, for the
// errors of a mistyped flag or command (parse_errors.h).
//
//   trainmem: error: unknown flag '--mdoel' for trainmem train; did you mean --model?
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace trainmem::cli {

// The edit distance counting a swap of two neighbouring letters as one edit, like an insertion,
// a deletion or a substitution (the optimal string alignment distance): "mdoel" is 1 from
// "model", where plain Levenshtein counts 2.
std::size_t edit_distance(std::string_view a, std::string_view b);

// The names nearest to `word`: those it begins up to a dash ("h100" for h100-80gb) if any; else
// all at the smallest distance, when that distance is at most a third of the longer of the two
// (at least 1): a typo, not another word. Empty when none is near.
std::vector<std::string> nearest_names(std::string_view word, const std::vector<std::string>& names);

// "; did you mean --model?", "; did you mean --zero or --seed?", or "" when no name is near.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& names);

}  // namespace trainmem::cli
