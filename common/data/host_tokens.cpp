#include "common/data/host_tokens.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
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
  if (map == MAP_FAILED) {
    const int error = errno;
    ::close(fd);
    throw DataError(path + ": mmap failed (" + std::strerror(error) + ")");
  }
  HostTokens t;  // owns the mapping and the descriptor from here (its destructor releases them)
  t.map_ = map;
  t.map_bytes_ = file_bytes;
  t.fd_ = fd;
  t.path_ = path;
  // The header, read as every token is: the file may already be shorter than it was at stat.
  char header[kTokenFileHeaderBytes];
  t.check_file_size();
  auto copy_header = [&] { std::memcpy(header, map, sizeof header); };
  if (!read_guarded(copy_header)) t.throw_cut_short();
  const std::uint64_t count = check_token_file_header(header, file_bytes, path);
  t.data_ = reinterpret_cast<const std::uint16_t*>(static_cast<const char*>(map) + kTokenFileHeaderBytes);  // 32-byte aligned
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
  fd_ = std::exchange(other.fd_, -1);
  path_ = std::move(other.path_);
  data_ = owned ? owned_.data() : std::exchange(other.data_, nullptr);
  size_ = std::exchange(other.size_, 0);
  other.data_ = nullptr;
  return *this;
}

HostTokens::~HostTokens() { release(); }

std::vector<std::uint16_t> HostTokens::to_vector() && {
  std::vector<std::uint16_t> tokens;
  if (mapped()) {
    tokens.resize(size_);  // allocated before the guarded read, which only copies
    read_tokens([&](const std::uint16_t* data) { std::copy(data, data + size_, tokens.data()); });
  } else {
    tokens = std::move(owned_);
  }
  release();
  return tokens;
}

void HostTokens::release() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
  if (fd_ >= 0) ::close(fd_);
  map_ = nullptr;
  map_bytes_ = 0;
  fd_ = -1;
  path_.clear();
  owned_.clear();
  data_ = nullptr;
  size_ = 0;
}

void HostTokens::check_file_size() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) throw DataError(path_ + ": cannot read the file's size (" + std::strerror(errno) + ")");
  if (static_cast<std::uint64_t>(st.st_size) != map_bytes_)
    throw DataError(path_ + ": the file changed while this run was reading it (it had " + std::to_string(map_bytes_) +
                    " bytes when the run opened it, now " + std::to_string(st.st_size) +
                    "); do not rewrite or truncate a token file during a run");
}

void HostTokens::throw_cut_short() const {
  struct stat st {};
  const std::string now = ::fstat(fd_, &st) == 0 ? ", now " + std::to_string(st.st_size) : std::string();
  throw DataError(path_ + ": the file was cut short while this run was reading it (it had " +
                  std::to_string(map_bytes_) + " bytes when the run opened it" + now +
                  "); do not rewrite or truncate a token file during a run");
}

std::uint16_t HostTokens::max_token() const {
  if (data_ == nullptr && size_ > 0) throw std::logic_error("HostTokens::max_token: tokens without values (meta)");
  std::uint16_t max = 0;
  read_tokens([&](const std::uint16_t* data) {
    if (size_ > 0) max = *std::max_element(data, data + size_);
  });
  return max;
}

void HostTokens::check_vocab(std::size_t vocab, const std::string& what) const {
  const std::uint16_t max = max_token();
  if (max >= vocab)
    throw DataError(what + ": token " + std::to_string(max) + " is outside the model's vocabulary of " +
                    std::to_string(vocab) + " (use --vocab " + std::to_string(max + 1) + " or more)");
}

}  // namespace trainmem
