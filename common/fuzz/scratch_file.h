// A scratch folder for fuzz targets whose code under test reads a file: one per process, removed
// at exit; write() puts the current input in a file of that folder (a new file each time, not the
// old one truncated: ext4 flushes a truncated-and-rewritten file to disk on close, which made each
// input take milliseconds).
#pragma once
#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace trainmem::fuzz {

class ScratchFolder {
 public:
  explicit ScratchFolder(const std::string& prefix) {
    std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr) std::abort();  // the harness itself failed: no finding
    dir_ = pattern;
  }
  ~ScratchFolder() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;

  // Writes data[0, size) to the file `name` in the folder; returns its path.
  std::string write(const char* name, const std::uint8_t* data, std::size_t size) const {
    const std::string path = (dir_ / name).string();
    std::error_code ec;
    std::filesystem::remove(path, ec);
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    out.close();
    if (!out) std::abort();  // the harness itself failed (disk full?): not a finding in the reader
    return path;
  }

 private:
  std::filesystem::path dir_;
};

}  // namespace trainmem::fuzz
