// The dataset on the host: either a vector (synthetic data, a byte-tokenized file) or a token
// file (.tok, common/data/token_file.h) memory-mapped read-only, so that only the pages the
// batches touch are ever read and the file is never copied into the process's heap.
//
// A mapped file can change under the run (another program rewrites or truncates it). Every read
// of its tokens goes through read_tokens(), which first checks that the file still has the size
// it was mapped with, and turns the SIGBUS of a read past a new end (a truncation racing the
// read) into a DataError naming the file (common/data/guarded_read.h). What was rewritten in
// place is caught by the loaders, which check each batch's tokens against the vocabulary
// (check_batch_tokens, batch_source.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/data/guarded_read.h"

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

  // The tokens; a mapped file's are read through read_tokens().
  const std::uint16_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool mapped() const { return map_ != nullptr; }
  // What the tokens are, for messages: the mapped file's path, else "the dataset".
  std::string name() const { return mapped() ? path_ : std::string("the dataset"); }

  // Runs read(data()). For a mapped file, throws DataError naming the file when it no longer has
  // the size it was mapped with, or when it is cut short during the read (which is then
  // abandoned: `read` only reads the tokens and writes plain memory, guarded_read.h).
  template <typename Read>
  void read_tokens(Read&& read) const {
    if (!mapped()) {
      read(data_);
      return;
    }
    check_file_size();
    auto read_mapping = [&] { read(data_); };
    if (!read_guarded(read_mapping)) throw_cut_short();
  }

  // The tokens as a vector: moved out when owned, copied from a mapped file.
  std::vector<std::uint16_t> to_vector() &&;
  // The largest token (0 when there are none): a scan of the whole dataset.
  std::uint16_t max_token() const;
  // Throws DataError naming `what` when a token is >= vocab (a scan of the whole dataset).
  void check_vocab(std::size_t vocab, const std::string& what) const;

 private:
  void release();
  void check_file_size() const;
  [[noreturn]] void throw_cut_short() const;
  std::vector<std::uint16_t> owned_;
  void* map_ = nullptr;  // the whole file, mmap'ed read-only
  std::size_t map_bytes_ = 0;
  int fd_ = -1;          // the mapped file, open: its size is checked before each read
  std::string path_;
  const std::uint16_t* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace trainmem
