#include "common/allocator/trace_file.h"

#include <nlohmann/json.hpp>

namespace trainmem {

std::string_view trace_text_begin() { return "{\"events\": ["; }

std::string trace_text_event(const MemoryRecorder& recorder, const TraceEvent& event, bool first) {
  return (first ? "\n" : ",\n") + recorder.event_json(event).dump();
}

std::string trace_text_end(const MemoryRecorder& recorder) {
  return "\n], \"phases\": " + nlohmann::json(recorder.phases()).dump() + "}\n";
}

void BufferedOutputFile::append(std::string_view text) {
  buffer_ += text;
  if (buffer_.size() < kFlushBytes) return;
  file_.write(buffer_);
  buffer_.clear();
}

void BufferedOutputFile::commit() {
  file_.write(buffer_);
  buffer_.clear();
  file_.commit();
}

TraceFileWriter::TraceFileWriter(MemoryRecorder& recorder, const std::string& path, const std::string& flag)
    : recorder_(recorder), file_(path, flag) {
  file_.append(trace_text_begin());
  recorder_.set_sink(this);
}

TraceFileWriter::~TraceFileWriter() { detach(); }

void TraceFileWriter::detach() noexcept {
  if (attached_ && recorder_.sink() == this) recorder_.set_sink(nullptr);
  attached_ = false;
}

void TraceFileWriter::write(const TraceEvent& event, const MemoryRecorder& recorder) {
  file_.append(trace_text_event(recorder, event, first_event_));
  first_event_ = false;
}

void TraceFileWriter::finish() {
  detach();
  recorder_.throw_if_failed();  // a file that misses events is not written
  file_.append(trace_text_end(recorder_));
  file_.commit();
}

}  // namespace trainmem
