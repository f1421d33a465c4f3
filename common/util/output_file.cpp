#include "common/util/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

namespace trainmem {

namespace {

std::string errno_text() { return std::strerror(errno); }

// "--json out.json", or "out.json" when no flag names it.
std::string named(const std::string& flag, const std::string& path) { return flag.empty() ? path : flag + " " + path; }

std::string folder_of(const std::string& path) {
  const std::string folder = std::filesystem::path(path).parent_path().string();
  return folder.empty() ? "." : folder;
}

// --- Where the bytes go

struct Target {
  std::string path;       // the file to replace: the path given, with symbolic links followed
  bool exists = false;
  bool is_folder = false;
  bool in_place = false;  // exists and cannot be renamed over: a device, a FIFO, /dev/stdout
};

// A symbolic link is followed, so that the link stays a link and the file it names is replaced.
// A link into /proc (/dev/stdout -> /proc/self/fd/1) names an open file rather than a path: it is
// written in place, whatever that file is.
Target resolve(const std::string& given) {
  std::filesystem::path p = given;
  for (int links = 0; links < 40; ++links) {  // 40: Linux's own limit (ELOOP)
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) return {p.string(), false, false, false};  // a new file
    if (!S_ISLNK(st.st_mode)) return {p.string(), true, S_ISDIR(st.st_mode), !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)};
    std::error_code error;
    std::filesystem::path next = std::filesystem::read_symlink(p, error);
    if (error) break;
    if (next.is_relative()) next = p.parent_path() / next;
    if (next.string().rfind("/proc/", 0) == 0) break;
    p = next;
  }
  return {given, true, false, true};  // open() follows the links, or says why it cannot
}

mode_t current_umask() {
  const mode_t mask = ::umask(0);  // the only way to read it is to set it: set it back at once
  ::umask(mask);
  return mask;
}

// --- A signal during the write removes the temporary file.
//
// The handler may call only async-signal-safe functions (unlink, sigaction, raise) and read only
// memory that is ready before it is installed: each pending file's path lives in a fixed slot,
// which is also mkstemp's template, so the handler always holds the name of a file once created.
// A few files may be pending at once (a benchmark writes its scratch data file while its
// --benchmark_out is pending); a slot is empty when its first byte is 0.
// A signal the program ignores (`nohup`, a background job's SIGINT) stays ignored.

constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};
constexpr std::size_t kSignalCount = sizeof kStopSignals / sizeof kStopSignals[0];
constexpr std::size_t kMaxPending = 4;
char g_temp_paths[kMaxPending][PATH_MAX];
struct sigaction g_previous[kSignalCount];
bool g_installed[kSignalCount];
std::size_t g_pending = 0;  // files pending: the handlers are installed while there is one

void remove_temp_files() {
  for (std::size_t i = 0; i < kMaxPending; ++i)
    if (g_temp_paths[i][0] != '\0') ::unlink(g_temp_paths[i]);
}

extern "C" void remove_temp_file_and_stop(int signal) {
  remove_temp_files();
  for (std::size_t i = 0; i < kSignalCount; ++i)
    if (kStopSignals[i] == signal) ::sigaction(signal, &g_previous[i], nullptr);
  ::raise(signal);  // delivered when this handler returns, to the handler the program had (by default: the end)
}

// exit() with a file pending (Google Benchmark's --help exits inside benchmark::Initialize)
// runs no destructor: this removes the temporary file then.
void remove_temp_file_at_exit() { remove_temp_files(); }

// The first pending file installs the handlers, the last one to go removes them.
void install_signal_cleanup() {
  static const bool at_exit = std::atexit(remove_temp_file_at_exit) == 0;
  (void)at_exit;
  if (g_pending++ > 0) return;
  for (std::size_t i = 0; i < kSignalCount; ++i) {
    ::sigaction(kStopSignals[i], nullptr, &g_previous[i]);
    g_installed[i] = g_previous[i].sa_handler != SIG_IGN;
    if (!g_installed[i]) continue;
    struct sigaction action {};
    action.sa_handler = remove_temp_file_and_stop;
    sigemptyset(&action.sa_mask);
    ::sigaction(kStopSignals[i], &action, nullptr);
  }
}

void remove_signal_cleanup(int slot) {
  g_temp_paths[slot][0] = '\0';
  if (--g_pending > 0) return;
  for (std::size_t i = 0; i < kSignalCount; ++i)
    if (g_installed[i]) ::sigaction(kStopSignals[i], &g_previous[i], nullptr);
}

}  // namespace

int write_fully(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t written = ::write(fd, bytes.data(), bytes.size());
    if (written < 0 && errno == EINTR) continue;  // a signal came first: nothing was written
    if (written < 0) return errno;
    bytes.remove_prefix(static_cast<std::size_t>(written));  // a short write: write the rest
  }
  return 0;
}

void check_output_path(const std::string& path, const std::string& flag) {
  auto refuse = [&](const std::string& why) { throw OutputPathError(named(flag, path) + ": " + why); };
  if (path.empty()) refuse("an empty path");
  const Target target = resolve(path);
  if (target.is_folder) refuse("is a folder; give a file name");
  if (target.in_place) {
    if (::access(path.c_str(), W_OK) != 0) refuse("cannot be written: " + errno_text());
    return;
  }
  // The temporary file is made in the target's folder: that folder must take new files.
  const std::string folder = folder_of(target.path);
  struct stat st {};
  if (::stat(folder.c_str(), &st) != 0) {
    if (errno == ENOENT) refuse("the folder " + folder + " does not exist");
    if (errno == ENOTDIR) refuse(folder + " is not a folder");
    refuse("cannot use the folder " + folder + ": " + errno_text());
  }
  if (!S_ISDIR(st.st_mode)) refuse(folder + " is not a folder");
  if (::access(folder.c_str(), W_OK | X_OK) != 0) refuse("the folder " + folder + " is not writable: " + errno_text());
}

void write_output_file(const std::string& path, std::string_view contents, const std::string& flag) {
  PendingOutputFile file(path, flag);
  file.write(contents);
  file.commit();
}

PendingOutputFile::PendingOutputFile(const std::string& path, const std::string& flag) : path_(path), flag_(flag) {
  const Target target = resolve(path);
  target_path_ = target.path;
  target_existed_ = target.exists;
  if (target.is_folder) fail("is a folder");
  if (target.in_place) {
    // O_APPEND: /dev/stdout redirected to a file gets the result after what was printed there.
    fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd_ < 0) fail(errno_text());
    write_path_ = path;
    return;
  }
  for (std::size_t i = 0; i < kMaxPending && slot_ < 0; ++i)
    if (g_temp_paths[i][0] == '\0') slot_ = static_cast<int>(i);
  if (slot_ < 0) throw std::logic_error("PendingOutputFile: more than " + std::to_string(kMaxPending) + " at once (" + path + ")");
  char* const temp_path = g_temp_paths[slot_];
  // A replaced file keeps its mode; a new one gets what `>` would give it (mkstemp makes 0600).
  struct stat st {};
  const mode_t mode = target.exists && ::stat(target.path.c_str(), &st) == 0 ? (st.st_mode & 07777) : (0666 & ~current_umask());
  const std::filesystem::path target_path = target.path;
  const std::string temp = folder_of(target.path) + "/." + target_path.filename().string() + ".tmp-XXXXXX";
  if (temp.size() >= PATH_MAX) fail(std::strerror(ENAMETOOLONG));
  std::memcpy(temp_path, temp.c_str(), temp.size() + 1);
  replaces_target_ = true;
  install_signal_cleanup();  // before the file exists: see remove_temp_file_and_stop
  fd_ = ::mkostemp(temp_path, O_CLOEXEC);
  if (fd_ >= 0) write_path_ = temp_path;
  if (fd_ < 0 || ::fchmod(fd_, mode) != 0) {
    const std::string why = message(errno_text());
    discard();  // no destructor runs for a constructor that throws
    throw OutputFileError(why);
  }
}

PendingOutputFile::~PendingOutputFile() {
  if (!committed_) discard();
}

void PendingOutputFile::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!replaces_target_) return;
  if (!write_path_.empty()) ::unlink(write_path_.c_str());
  remove_signal_cleanup(slot_);
  slot_ = -1;
  replaces_target_ = false;
}

void PendingOutputFile::write(std::string_view bytes) {
  const int error = write_fully(fd_, bytes);
  if (error != 0) fail(std::strerror(error));
}

void PendingOutputFile::commit() {
  // On disk before the rename: after a crash the target is the earlier file or the whole new one.
  if (replaces_target_ && ::fsync(fd_) != 0) fail(errno_text());
  // close() reports what the filesystem could not write earlier (NFS, quotas). Linux closes the
  // descriptor even when it says EINTR: never close twice.
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0 && errno != EINTR) fail(errno_text());
  if (!replaces_target_) {
    committed_ = true;
    return;
  }
  if (::rename(write_path_.c_str(), target_path_.c_str()) != 0) fail(errno_text());
  committed_ = true;
  remove_signal_cleanup(slot_);
  slot_ = -1;
  // The rename itself reaches the disk with the folder. (EINVAL: a filesystem that cannot sync folders.)
  const int folder = ::open(folder_of(target_path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const bool synced = folder >= 0 && (::fsync(folder) == 0 || errno == EINVAL);
  const std::string reason = synced ? "" : errno_text();
  if (folder >= 0) ::close(folder);
  if (!synced)
    throw OutputFileError("cannot write " + named(flag_, path_) + ": " + reason + " (syncing its folder after the rename)");
}

std::string PendingOutputFile::message(const std::string& reason) const {
  std::string text = "cannot write " + named(flag_, path_) + ": " + reason;
  if (replaces_target_ && target_existed_ && !committed_) text += "; the earlier file is kept";
  return text;
}

void PendingOutputFile::fail(const std::string& reason) const { throw OutputFileError(message(reason)); }

}  // namespace trainmem
