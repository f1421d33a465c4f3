#include "common/results/benchmark_out_file.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace trainmem {

namespace {

// "--benchmark_out=x" -> "x" when `arg` is that flag; nullptr otherwise.
const char* flag_value(const char* arg, const char* flag) {
  const std::size_t n = std::strlen(flag);
  return std::strncmp(arg, flag, n) == 0 && arg[n] == '=' ? arg + n + 1 : nullptr;
}

// Whether `text` is whole JSON as Google Benchmark writes it: standard JSON, except that a counter
// that is not a number is written NaN, -NaN, Infinity or -Infinity (the "cv" aggregate of a counter
// whose mean is 0, with --benchmark_repetitions). Those words, outside strings, are read as null.
bool whole_benchmark_json(const std::string& text) {
  std::string standard;
  standard.reserve(text.size());
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      standard += c;
      if (c == '\\' && i + 1 < text.size()) standard += text[++i];
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    bool replaced = false;
    for (const char* word : {"-Infinity", "Infinity", "-NaN", "NaN"}) {
      const std::size_t n = std::strlen(word);
      if (text.compare(i, n, word) == 0) {
        standard += "null";
        i += n - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) standard += c;
  }
  return nlohmann::json::accept(standard);
}

}  // namespace

BenchmarkOutFile::BenchmarkOutFile(int& argc, char**& argv, bool writes) {
  // Google Benchmark's defaults come from the environment; the last flag given wins.
  const char* env_path = std::getenv("BENCHMARK_OUT");
  const char* env_format = std::getenv("BENCHMARK_OUT_FORMAT");
  std::string path = env_path != nullptr ? env_path : "";
  if (env_format != nullptr && *env_format != '\0') format_ = env_format;
  for (int i = 0; i < argc; ++i) {
    if (const char* format = flag_value(argv[i], "--benchmark_out_format")) format_ = format;
    if (const char* value = flag_value(argv[i], "--benchmark_out")) path = value;
    else argv_.push_back(argv[i]);  // --benchmark_out_format too: Google Benchmark needs it
  }
  if (writes && !path.empty()) {
    check_output_path(path, "--benchmark_out");
    file_ = std::make_unique<PendingOutputFile>(path, "--benchmark_out");
    out_flag_ = "--benchmark_out=" + file_->write_path();
  } else {
    out_flag_ = "--benchmark_out=";  // no file, even when $BENCHMARK_OUT names one
  }
  argv_.push_back(out_flag_.data());
  argv_.push_back(nullptr);  // argv[argc] is null, as in main's
  argc = static_cast<int>(argv_.size()) - 1;
  argv = argv_.data();
}

void BenchmarkOutFile::commit() {
  if (!file_) return;
  // A device, a FIFO or /dev/stdout was written in place, and cannot be read back.
  if (file_->replaces_target()) {
    std::ifstream in(file_->write_path(), std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) file_->fail("cannot read back what Google Benchmark wrote");
    if (text.str().empty()) file_->fail("Google Benchmark wrote nothing");
    if (format_ == "json" && !whole_benchmark_json(text.str()))
      file_->fail("what Google Benchmark wrote is not whole JSON (a full disk?)");
  }
  file_->commit();
}

}  // namespace trainmem
