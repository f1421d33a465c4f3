#include "common/util/standard_output.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <streambuf>
#include <string>

#include "common/util/output_file.h"

namespace trainmem {

namespace {

// Unbuffered, as std::cout is by default (it hands every write to stdio at once): the output
// interleaves with stderr exactly as before.
class CheckedStdoutBuffer : public std::streambuf {
 public:
  int error() const { return error_; }

 protected:
  std::streamsize xsputn(const char* bytes, std::streamsize count) override {
    if (error_ == 0) error_ = write_fully(STDOUT_FILENO, {bytes, static_cast<std::size_t>(count)});
    return error_ == 0 ? count : 0;  // after an error nothing more is written: the first one is the reason
  }
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    const char byte = traits_type::to_char_type(c);
    return xsputn(&byte, 1) == 1 ? c : traits_type::eof();
  }

 private:
  int error_ = 0;
};

// Never destroyed: std::cout may still be flushed during exit, after static objects are gone.
CheckedStdoutBuffer* g_stdout_buffer = nullptr;

}  // namespace

void guard_standard_output() {
  // In order 0, 1, 2: open() returns the lowest free number, which is the closed one.
  for (const int fd : {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO})
    if (::fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
      const int reserved = ::open("/dev/null", fd == STDIN_FILENO ? O_WRONLY : O_RDONLY);
      if (reserved >= 0 && reserved != fd) ::close(reserved);
    }
  if (g_stdout_buffer == nullptr) g_stdout_buffer = new CheckedStdoutBuffer;
  std::cout.rdbuf(g_stdout_buffer);
}

void check_standard_output() {
  std::cout.flush();
  int error = g_stdout_buffer != nullptr ? g_stdout_buffer->error() : 0;
  if (std::fflush(stdout) != 0 && error == 0) error = errno;
  std::string reason = error != 0 ? std::strerror(error) : "";
  // Failed earlier through stdio, which kept no reason.
  if (reason.empty() && (std::ferror(stdout) || !std::cout)) reason = "an earlier write failed";
  if (!reason.empty()) throw OutputFileError("cannot write to standard output: " + reason);
}

}  // namespace trainmem
