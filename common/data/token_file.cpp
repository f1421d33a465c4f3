#include "common/data/token_file.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "common/data/dataset_check.h"
#include "common/util/checked_math.h"
#include "common/util/host_memory.h"
#include "common/util/output_file.h"

namespace trainmem {

namespace {
template <typename T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);  // little-endian hosts only (x86, Arm)
}
template <typename T>
T get(const char* bytes) {
  T value;
  std::memcpy(&value, bytes, sizeof value);
  return value;
}
}  // namespace

void write_token_file(const std::string& path, const std::vector<std::uint16_t>& tokens) {
  std::string header(kTokenFileMagic, sizeof kTokenFileMagic);
  put<std::uint32_t>(header, kTokenFileVersion);
  put<std::uint32_t>(header, kTokenDtypeUint16);
  put<std::uint64_t>(header, tokens.size());
  put<std::uint64_t>(header, 0);
  PendingOutputFile file(path, "");  // whole or not at all; the tokens are not copied
  file.write(header);
  file.write({reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2});
  file.commit();
}

std::uint64_t check_token_file_header(const char* header, std::uint64_t file_bytes, const std::string& path) {
  if (std::memcmp(header, kTokenFileMagic, sizeof kTokenFileMagic) != 0)
    throw DataError(path + ": not a trainmem token file (wrong magic; to train on text, give a file that "
                           "does not end in .tok and it is tokenized byte by byte)");
  const auto version = get<std::uint32_t>(header + 8);
  const auto dtype = get<std::uint32_t>(header + 12);
  const auto count = get<std::uint64_t>(header + 16);
  if (version != kTokenFileVersion)
    throw DataError(path + ": token file version " + std::to_string(version) + ", this trainmem reads version 1");
  if (dtype != kTokenDtypeUint16) throw DataError(path + ": token dtype " + std::to_string(dtype) + " (only 1 = uint16)");
  // 32 + 2 * count, checked: a count of 2^63 would otherwise wrap around to a small size.
  const std::uint64_t promised =
      kTokenFileHeaderBytes + checked_mul(count, 2, path + ": the header's token count (2 bytes each)");
  if (promised != file_bytes)
    throw DataError(path + ": the header promises " + std::to_string(count) + " tokens (" + std::to_string(promised) +
                    " bytes) but the file has " + std::to_string(file_bytes) + " bytes: truncated or corrupt");
  return count;
}

std::uint64_t check_data_file(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) throw DataError(path + ": no such file (or use --data synthetic)");
  if (std::filesystem::is_directory(status)) throw DataError(path + ": is a folder; give a token file or a text file");
  if (!std::filesystem::is_regular_file(status))
    throw DataError(path + ": not a regular file (a device, a pipe or a socket has no size to check); give a token "
                           "file or a text file");
  return std::filesystem::file_size(path, ec);
}

void check_tokens_fit_host_memory(std::uint64_t num_tokens, const std::string& what) {
  const std::uint64_t bytes = checked_mul(num_tokens, sizeof(std::uint16_t), what + ": the tokens' bytes");
  const HostMemory host = host_memory();
  if (bytes > host.available_bytes)
    throw DatasetExceedsHostMemory(what + ": " + std::to_string(num_tokens) + " tokens need " + std::to_string(bytes) +
                                   " bytes of host memory, more than the " + std::to_string(host.available_bytes) +
                                   " bytes available (" + host.source + ")");
}

std::vector<std::uint16_t> read_token_file(const std::string& path) {
  const std::uint64_t file_bytes = check_data_file(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(path + ": cannot open the file");
  char header[kTokenFileHeaderBytes];
  in.read(header, sizeof header);
  if (in.gcount() != static_cast<std::streamsize>(sizeof header))
    throw DataError(path + ": too short to be a token file (a 32-byte header is needed)");
  const std::uint64_t count = check_token_file_header(header, file_bytes, path);
  check_tokens_fit_host_memory(count, path);
  std::vector<std::uint16_t> tokens(count);
  in.read(reinterpret_cast<char*>(tokens.data()), static_cast<std::streamsize>(count * 2));
  if (!in) throw DataError(path + ": read error");
  return tokens;
}

namespace {
bool named_tok(const std::string& path) {
  const std::string ext = std::filesystem::path(path).extension().string();
  return ext.size() == 4 && ext[0] == '.' && std::tolower(static_cast<unsigned char>(ext[1])) == 't' &&
         std::tolower(static_cast<unsigned char>(ext[2])) == 'o' && std::tolower(static_cast<unsigned char>(ext[3])) == 'k';
}
}  // namespace

DataFormat data_format(const std::string& path) {
  check_data_file(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(path + ": cannot open the file");
  char magic[sizeof kTokenFileMagic] = {};
  in.read(magic, sizeof magic);
  if (in.gcount() == static_cast<std::streamsize>(sizeof magic) && std::memcmp(magic, kTokenFileMagic, sizeof magic) == 0)
    return DataFormat::token_file;
  if (named_tok(path))
    throw DataError(path + ": named like a token file but not one (it does not start with the magic \"TMTOKENS\"; "
                           "make one with 'trainmem tokens', or rename the file to train on its bytes)");
  return DataFormat::bytes;
}

std::vector<std::uint16_t> tokenize_bytes(const std::string& path) {
  const std::uint64_t file_bytes = check_data_file(path);
  check_tokens_fit_host_memory(file_bytes, path);  // one token per byte
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(path + ": cannot open the file");
  std::vector<std::uint16_t> tokens;
  tokens.reserve(file_bytes);
  char c;
  while (in.get(c)) tokens.push_back(static_cast<unsigned char>(c));
  return tokens;
}

std::size_t tokens_for_batches(std::size_t ranks, std::size_t batch, std::size_t seq) {
  return checked_add(checked_product({ranks, batch, seq}, "the tokens of one global batch (N x B x T)"), 1,
                     "the tokens of one global batch (N x B x T + 1)");
}

std::size_t synthetic_dataset_tokens(std::size_t min_tokens) {
  return std::max<std::size_t>(checked_mul(min_tokens, 4, "the synthetic corpus"), std::size_t{1} << 20);
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
    const std::size_t corpus_tokens = synthetic_dataset_tokens(min_tokens);
    check_tokens_fit_host_memory(corpus_tokens, "--data synthetic (4 batches of tokens)");
    tokens = synthetic_corpus(corpus_tokens, seed);
  } else {
    tokens = data_format(spec) == DataFormat::token_file ? read_token_file(spec) : tokenize_bytes(spec);
  }
  const std::uint16_t max_token = tokens.empty() ? 0 : *std::max_element(tokens.begin(), tokens.end());
  check_dataset({tokens.size(), max_token}, spec, min_tokens, vocab);
  return tokens;
}

}  // namespace trainmem
