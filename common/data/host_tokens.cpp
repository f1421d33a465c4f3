#include "common/data/host_tokens.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "common/data/token_file.h"

namespace trainmem {

HostTokens::HostTokens(std::vector<std::uint16_t> tokens)
    : owned_(std::move(tokens)), data_(owned_.data()), size_(owned_.size()) {}

HostTokens HostTokens::without_values(std::size_t n) {
  HostTokens t;
  t.size_ = n;
  return t;
}

HostTokens HostTokens::map_file(const std::string& path) {
  const std::uint64_t file_bytes = check_data_file(path);  // a regular file: a device or a pipe cannot be mapped
  if (file_bytes < kTokenFileHeaderBytes)
    throw DataError(path + ": too short to be a token file (a 32-byte header is needed)");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw DataError(path + ": cannot open the file (" + std::strerror(errno) + ")");
  void* map = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);  // the mapping keeps the file
  if (map == MAP_FAILED) throw DataError(path + ": mmap failed (" + std::strerror(errno) + ")");
  const char* header = static_cast<const char*>(map);
  std::uint64_t count = 0;
  try {
    count = check_token_file_header(header, file_bytes, path);
  } catch (...) {
    ::munmap(map, file_bytes);
    throw;
  }
  HostTokens t;
  t.map_ = map;
  t.map_bytes_ = file_bytes;
  t.data_ = reinterpret_cast<const std::uint16_t*>(header + kTokenFileHeaderBytes);  // 32-byte aligned
  t.size_ = static_cast<std::size_t>(count);
  return t;
}

HostTokens::HostTokens(HostTokens&& other) noexcept { *this = std::move(other); }

HostTokens& HostTokens::operator=(HostTokens&& other) noexcept {
  if (this == &other) return *this;
  release();
  const bool owned = other.map_ == nullptr;
  owned_ = std::move(other.owned_);
  map_ = std::exchange(other.map_, nullptr);
  map_bytes_ = std::exchange(other.map_bytes_, 0);
  data_ = owned ? owned_.data() : std::exchange(other.data_, nullptr);
  size_ = std::exchange(other.size_, 0);
  other.data_ = nullptr;
  return *this;
}

HostTokens::~HostTokens() { release(); }

std::vector<std::uint16_t> HostTokens::to_vector() && {
  std::vector<std::uint16_t> tokens = mapped() ? std::vector<std::uint16_t>(data_, data_ + size_) : std::move(owned_);
  release();
  return tokens;
}

void HostTokens::release() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
  owned_.clear();
  data_ = nullptr;
  size_ = 0;
}

void HostTokens::check_vocab(std::size_t vocab, const std::string& what) const {
  if (size_ == 0) return;
  const std::uint16_t max_token = *std::max_element(data_, data_ + size_);
  if (max_token >= vocab)
    throw DataError(what + ": token " + std::to_string(max_token) + " is outside the model's vocabulary of " +
                    std::to_string(vocab) + " (use --vocab " + std::to_string(max_token + 1) + " or more)");
}

}  // namespace trainmem
