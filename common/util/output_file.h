// Result files written whole or not at all.
//
// A result file is written to a temporary file beside it, flushed to disk (fsync), and renamed
// over the target in one step: whoever reads the target sees the earlier file or the new one,
// never half of one, and a full disk, an I/O error or a SIGTERM during the write keeps the
// earlier file. Every error is reported (OutputFileError, exit 1), none is ignored.
//
// A target that exists and is not a regular file (/dev/null, /dev/full, a FIFO, /dev/stdout)
// cannot be renamed over: it is written in place, with the same error checks.
#pragma once
#include <stdexcept>
#include <string>
#include <string_view>

namespace trainmem {

// A path that cannot be written (input error, exit 2): its folder does not exist, is not a
// folder or is not writable, or the path is a folder.
struct OutputPathError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// Writing failed (exit 1); the message says why and whether the earlier file is kept.
struct OutputFileError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Checks, before any work starts, that `path` can be written; `flag` names it in the message
// ("--json out/run.json: the folder out does not exist"). Throws OutputPathError.
void check_output_path(const std::string& path, const std::string& flag);

// Writes `contents` to `path` whole or not at all; `flag` (may be empty) names it in a message.
// Throws OutputFileError.
void write_output_file(const std::string& path, std::string_view contents, const std::string& flag);

// ::write until every byte is written, again after EINTR and short writes. Returns 0, or the
// errno of the write that failed.
int write_fully(int fd, std::string_view bytes);

// The mechanism of write_output_file, for writers that need the file's path rather than its bytes
// (Google Benchmark opens --benchmark_out itself: results/benchmark_out_file.h).
//
// The constructor creates a temporary file beside `path`; write() appends to it; commit() syncs
// it and renames it over `path`. Until commit() the target is untouched. Destroyed without
// commit() (an exception, an early return), the temporary file is removed; while it exists, a
// SIGINT, SIGTERM or SIGHUP removes it before the program ends as the signal would end it.
// New files get mode 0666 & ~umask, as a shell's `>` gives; a replaced file keeps its mode.
// Up to 4 may be pending at once (a benchmark's scratch data file while its --benchmark_out is).
class PendingOutputFile {
 public:
  PendingOutputFile(const std::string& path, const std::string& flag);  // throws OutputFileError
  ~PendingOutputFile();
  PendingOutputFile(const PendingOutputFile&) = delete;
  PendingOutputFile& operator=(const PendingOutputFile&) = delete;

  // Where the bytes go until commit(): the temporary file, or the target when written in place.
  const std::string& write_path() const { return write_path_; }
  // Whether write_path() is a temporary file (a regular file that can be read back).
  bool replaces_target() const { return replaces_target_; }

  void write(std::string_view bytes);  // throws OutputFileError
  void commit();                       // throws OutputFileError
  // An error found by the caller (e.g. "is empty"): the same message format, and the file is
  // not committed.
  [[noreturn]] void fail(const std::string& reason) const;

 private:
  std::string message(const std::string& reason) const;  // "cannot write --json out.json: <reason>[; the earlier file is kept]"
  void discard() noexcept;  // closes and removes the temporary file: the target stays as it was

  std::string path_, flag_;   // as given: for messages
  std::string target_path_;   // the file replaced (symbolic links followed)
  std::string write_path_;
  bool replaces_target_ = false;  // false: written in place
  bool target_existed_ = false;
  bool committed_ = false;
  int fd_ = -1;
  int slot_ = -1;  // its temporary file's slot in the signal handler's table
};

}  // namespace trainmem
