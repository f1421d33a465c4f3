// What `trainmem train` prints as it goes: one line per step, and a summary at the end.
//
//   step   10/300 | fp32 accum=1 recompute=none attention=naive | loss 4.2210 | 21.4 ms | 11963 tok/s | mem 2.91 MiB/24.00 MiB | peak 8.09 MiB/24.00 MiB | ETA 0:06
//   done: 300 steps in 6.42 s | mean step 21.4 ms | 11963 tok/s | peak allocated 8.09 MiB | peak reserved 24.00 MiB
//
// On a terminal the line is redrawn in place and must fit its width (a line that wraps cannot be
// redrawn: each step would add a line). It drops whole fields, least important first, until it
// fits: the techniques, then ms, tok/s, the peak, ETA, the memory and the loss; the step stays
// (cut at the width if even it is too wide). In a log (not a terminal) every field is printed.
// Memory is in binary units, as PyTorch prints it (format_bytes: "8.09 MiB").
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/train/trainer.h"

namespace trainmem::cli {

// No width limit: every field (a log).
constexpr std::size_t kAnyWidth = 0;

// The line for step `r` of `total_steps`, at most `width` characters (kAnyWidth: no limit).
// `techniques`: the run's words ("fp32 accum=1 ..."); `eta_seconds`: the time the steps left will take.
std::string progress_line(const StepResult& r, long total_steps, const std::string& techniques, double eta_seconds,
                          std::size_t width);

// "0:41", "12:05", "1:02:03" (hours:minutes:seconds, rounded to the second).
std::string format_duration(double seconds);

// The run so far: the ETA of each line and the summary at the end.
class RunSummary {
 public:
  void add(const StepResult& r);
  // The mean step time so far, times the steps left.
  double eta_seconds(long total_steps) const;
  // "done: N steps in S s | mean step M ms | T tok/s | peak allocated A | peak reserved R".
  std::string line() const;

 private:
  long steps_ = 0;
  double ms_ = 0, tokens_ = 0;  // tokens: each step's tokens_per_s x its time
  std::int64_t peak_allocated_ = 0, peak_reserved_ = 0;
};

// The columns of the terminal at file descriptor `fd` (TIOCGWINSZ), else $COLUMNS, else 80.
std::size_t terminal_width(int fd);

}  // namespace trainmem::cli
