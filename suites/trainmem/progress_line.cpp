#include "suites/trainmem/progress_line.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "common/util/byte_size.h"

namespace trainmem::cli {

namespace {

std::string printed(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

std::string bytes(std::int64_t n) { return format_bytes(static_cast<std::uint64_t>(std::max<std::int64_t>(n, 0))); }

struct Field {
  std::string text;
  int keep_rank;  // 0 is kept longest; a narrow terminal drops the highest rank first
};

constexpr std::string_view kSeparator = " | ";

std::size_t joined_length(const std::vector<const Field*>& fields) {
  std::size_t length = 0;
  for (const Field* f : fields) length += f->text.size() + (length ? kSeparator.size() : 0);
  return length;
}

}  // namespace

std::string format_duration(double seconds) {
  const long total = std::isfinite(seconds) && seconds > 0 ? std::lround(seconds) : 0;
  char text[48];
  if (total >= 3600)
    std::snprintf(text, sizeof text, "%ld:%02ld:%02ld", total / 3600, total / 60 % 60, total % 60);
  else
    std::snprintf(text, sizeof text, "%ld:%02ld", total / 60, total % 60);
  return text;
}

std::string progress_line(const StepResult& r, long total_steps, const std::string& techniques, double eta_seconds,
                          std::size_t width) {
  char step[64];
  std::snprintf(step, sizeof step, "step %4ld/%ld", r.step, total_steps);
  std::string words = techniques;
  if (r.loss_scale != 1.0) words += printed(" scale=%g", r.loss_scale);
  std::string loss = printed("loss %.4f", r.loss);
  if (r.skipped) loss += " SKIPPED(inf/nan grads)";  // with the loss: a skipped step is never dropped before it
  // In display order; keep_rank says which go first when the line is too wide.
  const std::vector<Field> fields = {
      {step, 0},
      {words, 7},
      {loss, 1},
      {printed("%.1f ms", r.ms), 6},
      {printed("%.0f tok/s", r.tokens_per_s), 5},
      {"mem " + bytes(r.allocated_bytes) + "/" + bytes(r.reserved_bytes), 2},
      {"peak " + bytes(r.peak_allocated_bytes) + "/" + bytes(r.peak_reserved_bytes), 4},
      {"ETA " + format_duration(eta_seconds), 3},
  };
  std::vector<const Field*> shown;
  for (const Field& f : fields)
    if (!f.text.empty()) shown.push_back(&f);
  while (width != kAnyWidth && shown.size() > 1 && joined_length(shown) > width)
    shown.erase(std::max_element(shown.begin(), shown.end(),
                                 [](const Field* a, const Field* b) { return a->keep_rank < b->keep_rank; }));
  std::string line;
  for (const Field* f : shown) line += (line.empty() ? "" : std::string(kSeparator)) + f->text;
  if (width != kAnyWidth && line.size() > width) line.resize(width);  // the step alone is wider than the terminal
  return line;
}

void RunSummary::add(const StepResult& r) {
  ++steps_;
  ms_ += r.ms;
  tokens_ += r.tokens_per_s * r.ms / 1000.0;
  peak_allocated_ = std::max(peak_allocated_, r.peak_allocated_bytes);
  peak_reserved_ = std::max(peak_reserved_, r.peak_reserved_bytes);
}

double RunSummary::eta_seconds(long total_steps) const {
  if (steps_ == 0 || total_steps <= steps_) return 0;
  return ms_ / static_cast<double>(steps_) * static_cast<double>(total_steps - steps_) / 1000.0;
}

std::string RunSummary::line() const {
  const double seconds = ms_ / 1000.0;
  return "done: " + std::to_string(steps_) + (steps_ == 1 ? " step" : " steps") + " in " + printed("%.2f s", seconds) +
         " | mean step " + printed("%.1f ms", steps_ ? ms_ / static_cast<double>(steps_) : 0.0) + " | " +
         printed("%.0f tok/s", seconds > 0 ? tokens_ / seconds : 0.0) + " | peak allocated " + bytes(peak_allocated_) +
         " | peak reserved " + bytes(peak_reserved_);
}

std::size_t terminal_width(int fd) {
  winsize size{};
  if (ioctl(fd, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  if (const char* columns = std::getenv("COLUMNS")) {
    char* end = nullptr;
    const long n = std::strtol(columns, &end, 10);
    if (end != columns && *end == '\0' && n > 0 && n <= 100000) return static_cast<std::size_t>(n);
  }
  return 80;
}

}  // namespace trainmem::cli
