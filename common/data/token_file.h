// The token file format, and the datasets trainmem trains on.
//
//   offset  size  field
//   0       8     magic "TMTOKENS"
//   8       4     version (uint32, little-endian) = 1
//   12      4     dtype   (uint32) = 1: uint16 tokens
//   16      8     token count (uint64)
//   24      8     reserved (0)
//   32      2*n   the tokens, uint16 little-endian
//
// A 32-byte header is enough to reject the wrong file (magic), a newer format (version), and a
// truncated one (the size must be exactly 32 + 2 * count).
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace trainmem {

constexpr char kTokenFileMagic[8] = {'T', 'M', 'T', 'O', 'K', 'E', 'N', 'S'};
constexpr std::uint32_t kTokenFileVersion = 1;
constexpr std::uint32_t kTokenDtypeUint16 = 1;
constexpr std::size_t kTokenFileHeaderBytes = 32;

// A data file that cannot be used; the message names the file and what is wrong with it.
struct DataError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Whole or not at all (common/util/output_file.h); throws OutputFileError.
void write_token_file(const std::string& path, const std::vector<std::uint16_t>& tokens);
// Reads the whole file into host memory: refused (DataError) before reading when its tokens would
// not fit in the host memory available (host_memory.h).
std::vector<std::uint16_t> read_token_file(const std::string& path);

// The checks of a token file's 32-byte header against the file's size, shared by the reader and
// the lazy loader's memory map: magic, version, dtype, and exactly 32 + 2 * count bytes (checked
// arithmetic: a count of 2^63 or more is refused, not wrapped). Returns the token count.
std::uint64_t check_token_file_header(const char* header, std::uint64_t file_bytes, const std::string& path);

// --data names a regular file (not a folder, a device such as /dev/zero, or a pipe): its size, or
// a DataError saying what the path is instead.
std::uint64_t check_data_file(const std::string& path);

// A dataset larger than the host memory available. The message gives the sizes; what to do instead
// is the driver's to add: the loaders that need no host copy are techniques, and their
// registrations say so (Technique::host_dataset_remedy).
struct DatasetExceedsHostMemory : DataError {
  using DataError::DataError;
};

// Refuses (DatasetExceedsHostMemory, naming the size and the limit) `num_tokens` uint16 tokens that
// would not fit in the host memory available. `what` names them in the message ("--data corpus.txt").
void check_tokens_fit_host_memory(std::uint64_t num_tokens, const std::string& what);

// How a data file is read, decided by its content, never by its name alone: a file that starts
// with the magic "TMTOKENS" is a token file whatever it is called; any other file is tokenized
// byte by byte, except one named *.tok in any case (X.tok, X.TOK), which is refused (DataError):
// it claims to be a token file and is not one, and its bytes are not what its owner meant.
enum class DataFormat { token_file, bytes };
DataFormat data_format(const std::string& path);

// Byte-level tokenization of any file: one token per byte (vocabulary 256).
std::vector<std::uint16_t> tokenize_bytes(const std::string& path);

// A deterministic synthetic corpus with structure a small model can learn: "sentences" of words
// drawn from a fixed random vocabulary of lowercase words with Zipf-like frequencies and a
// preferred-successor (bigram) rule, separated by spaces and ended by ". ". Byte-level tokens.
// The same seed gives the same tokens on every machine.
std::vector<std::uint16_t> synthetic_corpus(std::size_t num_tokens, std::uint64_t seed);
// Its largest token: its words are lowercase letters ('a' .. 'z', then ' ' and '.', smaller).
constexpr std::uint16_t kSyntheticCorpusMaxToken = 'z';
// The size of `--data synthetic` for runs that need `min_tokens`: four batches' worth, at least
// 2^20 tokens (load_dataset makes a synthetic_corpus of this size).
std::size_t synthetic_dataset_tokens(std::size_t min_tokens);

// The tokens of one global batch, N ranks x B rows x T positions, plus the last row's last target
// (checked arithmetic).
std::size_t tokens_for_batches(std::size_t ranks, std::size_t batch, std::size_t seq);

// --data synthetic | a token file | any other file (byte-tokenized; data_format decides). Checks
// the tokens as check_dataset does (dataset_check.h): at least `min_tokens`, each below `vocab`.
std::vector<std::uint16_t> load_dataset(const std::string& spec, std::size_t min_tokens, std::size_t vocab,
                                        std::uint64_t seed);

}  // namespace trainmem
