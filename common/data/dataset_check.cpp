#include "common/data/dataset_check.h"

#include <algorithm>
#include <fstream>
#include <vector>

#include "common/data/token_file.h"

namespace trainmem {

namespace {

constexpr std::size_t kReadBufferBytes = std::size_t{1} << 20;

// The largest value of the `Token`s (uint8_t or uint16_t) from `offset` to the end of the file.
template <typename Token>
std::uint16_t largest_token_in(const std::string& path, std::uint64_t offset) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(path + ": cannot open the file");
  in.seekg(static_cast<std::streamoff>(offset));
  std::vector<Token> buffer(kReadBufferBytes / sizeof(Token));
  Token max = 0;
  while (in) {
    in.read(reinterpret_cast<char*>(buffer.data()), static_cast<std::streamsize>(buffer.size() * sizeof(Token)));
    const auto n = static_cast<std::size_t>(in.gcount()) / sizeof(Token);
    if (n > 0) max = std::max(max, *std::max_element(buffer.begin(), buffer.begin() + static_cast<std::ptrdiff_t>(n)));
  }
  if (in.bad()) throw DataError(path + ": read error");
  return max;
}

}  // namespace

DatasetFacts inspect_dataset(const std::string& spec, std::size_t min_tokens) {
  if (spec == "synthetic") return {synthetic_dataset_tokens(min_tokens), kSyntheticCorpusMaxToken};
  const std::uint64_t file_bytes = check_data_file(spec);
  if (data_format(spec) == DataFormat::bytes) return {file_bytes, largest_token_in<std::uint8_t>(spec, 0)};
  char header[kTokenFileHeaderBytes];
  std::ifstream in(spec, std::ios::binary);
  in.read(header, sizeof header);
  if (in.gcount() != static_cast<std::streamsize>(sizeof header))
    throw DataError(spec + ": too short to be a token file (a 32-byte header is needed)");
  const std::uint64_t count = check_token_file_header(header, file_bytes, spec);
  return {count, largest_token_in<std::uint16_t>(spec, kTokenFileHeaderBytes)};
}

void check_dataset(const DatasetFacts& facts, const std::string& spec, std::size_t min_tokens, std::size_t vocab) {
  if (facts.tokens < min_tokens)
    throw DataError("--data " + spec + ": " + std::to_string(facts.tokens) + " tokens, fewer than the " +
                    std::to_string(min_tokens) + " one batch needs (ranks x B x T + 1); use a smaller --batch or --seq");
  if (facts.tokens == 0) throw DataError("--data " + spec + ": holds no tokens");
  if (facts.max_token >= vocab)
    throw DataError("--data " + spec + ": token " + std::to_string(facts.max_token) +
                    " is outside the model's vocabulary of " + std::to_string(vocab) + " (use --vocab " +
                    std::to_string(facts.max_token + 1) + " or more)");
}

std::size_t largest_batch_in(std::uint64_t tokens, std::size_t ranks, std::size_t T) {
  if (tokens == 0 || ranks == 0 || T == 0) return 0;
  return static_cast<std::size_t>((tokens - 1) / (static_cast<std::uint64_t>(ranks) * T));
}

}  // namespace trainmem
