// The recorder's events streamed to a file as they happen (--record-memory, `replay --record`),
// so that a run of any length keeps none of them in memory; `trainmem replay` reads the file back.
//
//   {"events": [{"seq", "action", "addr", "size", "block_size", "category", "stream", "step",
//                "phase"[, "name"]}, ...],            (MemoryRecorder::event_json, one a line)
//    "phases": ["none", "forward", ...]}
//
// The file is written whole or not at all (common/util/output_file.h): the events go to a
// temporary file beside the target, and finish() completes and renames it. A write that fails
// stops the recorder (MemoryRecorder::throw_if_failed then says why); the target is untouched.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

#include "common/allocator/memory_recorder.h"
#include "common/util/output_file.h"

namespace trainmem {

// The file's text in three parts: before the events, one event (`first`: the list's first, with
// no separator before it), and the end (the phases).
std::string_view trace_text_begin();
std::string trace_text_event(const MemoryRecorder& recorder, const TraceEvent& event, bool first);
std::string trace_text_end(const MemoryRecorder& recorder);

// A result file written in pieces, a buffer at a time (PendingOutputFile underneath).
class BufferedOutputFile {
 public:
  BufferedOutputFile(const std::string& path, const std::string& flag) : file_(path, flag) {}
  void append(std::string_view text);  // throws OutputFileError
  void commit();                       // throws OutputFileError

 private:
  static constexpr std::size_t kFlushBytes = std::size_t{1} << 20;
  PendingOutputFile file_;
  std::string buffer_;
};

class TraceFileWriter final : public TraceSink {
 public:
  // Starts writing: from now on every event `recorder` records goes to `path` (`flag` names it
  // in messages). Throws OutputFileError.
  TraceFileWriter(MemoryRecorder& recorder, const std::string& path, const std::string& flag = "");
  // Stops writing; a file not finished is removed (the target stays as it was).
  ~TraceFileWriter() override;
  TraceFileWriter(const TraceFileWriter&) = delete;
  TraceFileWriter& operator=(const TraceFileWriter&) = delete;

  void write(const TraceEvent& event, const MemoryRecorder& recorder) override;
  // Ends the lists and renames the file over the target; no event is written after it. Throws
  // RecordingError if the recorder stopped on a failure, OutputFileError if the write fails.
  void finish();

  // The host memory a writer holds at most besides the recorder (its buffer).
  static constexpr std::size_t kMaxBufferBytes = std::size_t{2} << 20;

 private:
  void detach() noexcept;

  MemoryRecorder& recorder_;
  BufferedOutputFile file_;
  bool first_event_ = true;
  bool attached_ = true;
};

}  // namespace trainmem
