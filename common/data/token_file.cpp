#include "common/data/token_file.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

namespace trainmem {

namespace {
template <typename T>
void put(std::ofstream& out, T value) {
  out.write(reinterpret_cast<const char*>(&value), sizeof value);  // little-endian hosts only (x86, Arm)
}
template <typename T>
T get(const char* bytes) {
  T value;
  std::memcpy(&value, bytes, sizeof value);
  return value;
}
}  // namespace

void write_token_file(const std::string& path, const std::vector<std::uint16_t>& tokens) {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw DataError(path + ": cannot open for writing");
  out.write(kTokenFileMagic, sizeof kTokenFileMagic);
  put<std::uint32_t>(out, kTokenFileVersion);
  put<std::uint32_t>(out, kTokenDtypeUint16);
  put<std::uint64_t>(out, tokens.size());
  put<std::uint64_t>(out, 0);
  out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
  if (!out) throw DataError(path + ": error while writing");
}

std::vector<std::uint16_t> read_token_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(path + ": cannot open the file");
  char header[kTokenFileHeaderBytes];
  in.read(header, sizeof header);
  if (in.gcount() != static_cast<std::streamsize>(sizeof header))
    throw DataError(path + ": too short to be a token file (a 32-byte header is needed)");
  if (std::memcmp(header, kTokenFileMagic, sizeof kTokenFileMagic) != 0)
    throw DataError(path + ": not a trainmem token file (wrong magic; to train on text, give a file that "
                           "does not end in .tok and it is tokenized byte by byte)");
  const auto version = get<std::uint32_t>(header + 8);
  const auto dtype = get<std::uint32_t>(header + 12);
  const auto count = get<std::uint64_t>(header + 16);
  if (version != kTokenFileVersion)
    throw DataError(path + ": token file version " + std::to_string(version) + ", this trainmem reads version 1");
  if (dtype != kTokenDtypeUint16) throw DataError(path + ": token dtype " + std::to_string(dtype) + " (only 1 = uint16)");
  const auto size = std::filesystem::file_size(path);
  if (size != kTokenFileHeaderBytes + 2 * count)
    throw DataError(path + ": the header promises " + std::to_string(count) + " tokens (" +
                    std::to_string(kTokenFileHeaderBytes + 2 * count) + " bytes) but the file has " +
                    std::to_string(size) + " bytes: truncated or corrupt");
  std::vector<std::uint16_t> tokens(count);
  in.read(reinterpret_cast<char*>(tokens.data()), static_cast<std::streamsize>(count * 2));
  if (!in) throw DataError(path + ": read error");
  return tokens;
}

std::vector<std::uint16_t> tokenize_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(path + ": cannot open the file");
  std::vector<std::uint16_t> tokens;
  char c;
  while (in.get(c)) tokens.push_back(static_cast<unsigned char>(c));
  return tokens;
}

std::vector<std::uint16_t> synthetic_corpus(std::size_t num_tokens, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  // A vocabulary of 64 words, 2..7 lowercase letters each.
  std::vector<std::string> words(64);
  std::uniform_int_distribution<int> length(2, 7), letter(0, 25);
  for (std::string& w : words) {
    const int n = length(rng);
    for (int i = 0; i < n; ++i) w += static_cast<char>('a' + letter(rng));
  }
  // Zipf-like frequencies (word k has weight 1/(k+1)), and each word prefers one successor.
  std::vector<double> weights(words.size());
  for (std::size_t k = 0; k < words.size(); ++k) weights[k] = 1.0 / static_cast<double>(k + 1);
  std::discrete_distribution<std::size_t> zipf(weights.begin(), weights.end());
  std::vector<std::size_t> successor(words.size());
  std::uniform_int_distribution<std::size_t> any(0, words.size() - 1);
  for (std::size_t& s : successor) s = any(rng);
  std::uniform_real_distribution<double> u(0, 1);
  std::uniform_int_distribution<int> sentence_length(4, 12);

  std::vector<std::uint16_t> tokens;
  tokens.reserve(num_tokens + 16);
  std::size_t word = zipf(rng);
  while (tokens.size() < num_tokens) {
    const int n = sentence_length(rng);
    for (int i = 0; i < n; ++i) {
      for (char c : words[word]) tokens.push_back(static_cast<unsigned char>(c));
      tokens.push_back(i + 1 < n ? ' ' : '.');
      word = u(rng) < 0.6 ? successor[word] : zipf(rng);
    }
    tokens.push_back(' ');
  }
  tokens.resize(num_tokens);
  return tokens;
}

std::vector<std::uint16_t> load_dataset(const std::string& spec, std::size_t min_tokens, std::size_t vocab,
                                        std::uint64_t seed) {
  std::vector<std::uint16_t> tokens;
  if (spec == "synthetic") {
    tokens = synthetic_corpus(std::max<std::size_t>(min_tokens * 4, 1 << 20), seed);
  } else {
    if (!std::filesystem::exists(spec)) throw DataError("--data " + spec + ": no such file (or use --data synthetic)");
    const bool token_file = spec.size() > 4 && spec.compare(spec.size() - 4, 4, ".tok") == 0;
    tokens = token_file ? read_token_file(spec) : tokenize_bytes(spec);
  }
  if (tokens.size() < min_tokens)
    throw DataError("--data " + spec + ": " + std::to_string(tokens.size()) + " tokens, fewer than the " +
                    std::to_string(min_tokens) + " one batch needs (B * T + 1); use a smaller --batch or --seq");
  const auto max_token = *std::max_element(tokens.begin(), tokens.end());
  if (max_token >= vocab)
    throw DataError("--data " + spec + ": token " + std::to_string(max_token) + " is outside the model's vocabulary of " +
                    std::to_string(vocab) + " (use --vocab " + std::to_string(max_token + 1) + " or more)");
  return tokens;
}

}  // namespace trainmem
