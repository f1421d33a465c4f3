// The progress line of `trainmem train` (progress_line.h): within any width, the most important
// fields kept; the ETA; the summary at the end. Before, the line was about 165 characters whatever
// the terminal, redrawn with '\r': on an 80-column terminal every step wrapped onto new lines.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "common/util/byte_size.h"
#include "suites/trainmem/progress_line.h"

namespace trainmem::cli {
namespace {

StepResult a_step() {
  StepResult r;
  r.step = 123;
  r.loss = 4.221;
  r.ms = 21.4;
  r.tokens_per_s = 11963;
  r.loss_scale = 65536;
  r.allocated_bytes = 3 * MiB;
  r.reserved_bytes = 24 * MiB;
  r.peak_allocated_bytes = 8 * MiB;
  r.peak_reserved_bytes = 24 * MiB;
  return r;
}

const std::string kTechniques = "bf16 accum=8 recompute=selective attention=flash loader=lazy prefetch=2";

// Each field's text, most important first: the order in which a narrowing terminal keeps them.
const std::vector<std::string> kByImportance = {"step  123/300", "loss 4.2210", "mem 3.00 MiB/24.00 MiB", "ETA 1:05",
                                                "peak 8.00 MiB/24.00 MiB", "11963 tok/s", "21.4 ms",
                                                kTechniques + " scale=65536"};

TEST(ProgressLine, ALogGetsEveryField) {
  const std::string line = progress_line(a_step(), 300, kTechniques, 65.0, kAnyWidth);
  for (const std::string& field : kByImportance) EXPECT_NE(line.find(field), std::string::npos) << field << " in " << line;
  EXPECT_GT(line.size(), 80u);  // so the widths below do make it drop fields
}

TEST(ProgressLine, FitsEveryWidthKeepingTheMostImportantFields) {
  const StepResult r = a_step();
  const std::size_t full = progress_line(r, 300, kTechniques, 65.0, kAnyWidth).size();
  for (std::size_t width = 1; width <= full + 1; ++width) {
    SCOPED_TRACE("width " + std::to_string(width));
    const std::string line = progress_line(r, 300, kTechniques, 65.0, width);
    EXPECT_LE(line.size(), width) << line;
    EXPECT_EQ(line.find_first_of("\r\n"), std::string::npos);
    // Once a field is dropped, every less important one is dropped too.
    std::optional<std::string> first_missing;
    for (const std::string& field : kByImportance) {
      const bool present = line.find(field) != std::string::npos;
      if (first_missing) {
        EXPECT_FALSE(present) << field << " kept without " << *first_missing << ": " << line;
      }
      if (!present && !first_missing) first_missing = field;
    }
    if (width >= kByImportance.front().size()) {
      EXPECT_EQ(line.rfind(kByImportance.front(), 0), 0u) << line;
    } else {
      EXPECT_EQ(line, kByImportance.front().substr(0, width));  // cut, never wrapped
    }
  }
  // An 80-column terminal (79 usable) keeps the step, the loss, the memory and the ETA.
  const std::string line = progress_line(r, 300, kTechniques, 65.0, 79);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_NE(line.find(kByImportance[i]), std::string::npos) << line;
}

TEST(ProgressLine, ASkippedStepIsShownWithTheLoss) {
  StepResult r = a_step();
  r.skipped = true;
  // As wide as the step and the loss: the rest is dropped, the warning is not.
  const std::string kept = "step  123/300 | loss 4.2210 SKIPPED(inf/nan grads)";
  EXPECT_EQ(progress_line(r, 300, kTechniques, 65.0, kept.size()), kept);
}

TEST(ProgressLine, DurationsAreHoursMinutesSeconds) {
  EXPECT_EQ(format_duration(0), "0:00");
  EXPECT_EQ(format_duration(65), "1:05");
  EXPECT_EQ(format_duration(3723), "1:02:03");
  EXPECT_EQ(format_duration(-1), "0:00");
}

// The ETA is the mean step time so far times the steps left; the summary has the mean step time,
// the tokens per second over the whole run, and the peaks in binary units.
TEST(ProgressLine, TheEtaAndTheSummaryComeFromTheStepsSoFar) {
  StepResult a = a_step(), b = a_step();
  a.ms = 10;
  a.tokens_per_s = 1000;  // 10 tokens
  b.ms = 30;
  b.tokens_per_s = 3000;  // 90 tokens
  b.peak_allocated_bytes = 9 * MiB;
  RunSummary summary;
  summary.add(a);
  summary.add(b);
  EXPECT_DOUBLE_EQ(summary.eta_seconds(5), (10.0 + 30.0) / 2 * 3 / 1000);
  EXPECT_EQ(summary.eta_seconds(2), 0.0);
  const std::string line = summary.line();
  for (const std::string& text : {std::string("done: 2 steps in 0.04 s"), std::string("mean step 20.0 ms"),
                                  std::string("2500 tok/s"), "peak allocated " + format_bytes(9 * MiB),
                                  "peak reserved " + format_bytes(24 * MiB)})
    EXPECT_NE(line.find(text), std::string::npos) << text << " in " << line;
}

// Not a terminal: $COLUMNS, else 80.
TEST(ProgressLine, TheWidthOfWhatIsNoTerminalIsColumnsOr80) {
  const int fd = open("/dev/null", O_WRONLY);
  ASSERT_GE(fd, 0);
  const char* saved = std::getenv("COLUMNS");
  const std::optional<std::string> before = saved ? std::optional<std::string>(saved) : std::nullopt;
  setenv("COLUMNS", "50", 1);
  EXPECT_EQ(terminal_width(fd), 50u);
  setenv("COLUMNS", "wide", 1);
  EXPECT_EQ(terminal_width(fd), 80u);
  unsetenv("COLUMNS");
  EXPECT_EQ(terminal_width(fd), 80u);
  if (before) setenv("COLUMNS", before->c_str(), 1);
  close(fd);
}

}  // namespace
}  // namespace trainmem::cli
