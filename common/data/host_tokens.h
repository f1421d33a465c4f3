// The dataset on the host: either a vector (synthetic data, a byte-tokenized file) or a token
// file (.tok, common/data/token_file.h) memory-mapped read-only, so that only the pages the
// batches touch are ever read and the file is never copied into the process's heap.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace trainmem {

class HostTokens {
 public:
  HostTokens() = default;
  // Owns the tokens.
  explicit HostTokens(std::vector<std::uint16_t> tokens);
  // `n` tokens without values, for the meta device (common/device/device.h), where the loaders
  // read none: data() is null. Makes a run's data sizes without holding the data.
  static HostTokens without_values(std::size_t n);
  // Maps a token file. Throws DataError (common/data/token_file.h) with the messages
  // read_token_file gives: cannot open, too short for the header, wrong magic, wrong version or
  // dtype, size not 32 + 2 * count (truncated or corrupt).
  static HostTokens map_file(const std::string& path);

  HostTokens(HostTokens&& other) noexcept;
  HostTokens& operator=(HostTokens&& other) noexcept;
  HostTokens(const HostTokens&) = delete;
  HostTokens& operator=(const HostTokens&) = delete;
  ~HostTokens();

  const std::uint16_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool mapped() const { return map_ != nullptr; }
  // The tokens as a vector: moved out when owned, copied from a mapped file.
  std::vector<std::uint16_t> to_vector() &&;
  // Throws DataError naming `what` when a token is >= vocab (a scan of the whole dataset).
  void check_vocab(std::size_t vocab, const std::string& what) const;

 private:
  void release();
  std::vector<std::uint16_t> owned_;
  void* map_ = nullptr;  // the whole file, mmap'ed read-only
  std::size_t map_bytes_ = 0;
  const std::uint16_t* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace trainmem
