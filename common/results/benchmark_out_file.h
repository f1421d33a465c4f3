// Google Benchmark's --benchmark_out written whole or not at all (common/util/output_file.h).
//
// Google Benchmark (1.7) opens that file itself, truncating it, and never says whether writing it
// failed. So the flag is taken out of argv before benchmark::Initialize sees it: its path is
// checked at once, Google Benchmark is given a temporary file beside it instead, and commit(),
// after RunSpecifiedBenchmarks, checks what was written and renames it over the target.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "common/util/output_file.h"

namespace trainmem {

class BenchmarkOutFile {
 public:
  // Takes --benchmark_out=PATH from argv (or $BENCHMARK_OUT, which Google Benchmark also reads)
  // and checks PATH (OutputPathError). `writes`: false on the ranks other than 0 under mpirun,
  // which write no file (they would all write the same one). argv then points into this object.
  BenchmarkOutFile(int& argc, char**& argv, bool writes = true);

  // After RunSpecifiedBenchmarks: the file is not empty and, in the json format, parses; then it
  // replaces PATH. Throws OutputFileError (the earlier file is kept). Without a file: nothing.
  void commit();

 private:
  std::string format_ = "json";  // --benchmark_out_format
  std::unique_ptr<PendingOutputFile> file_;
  std::string out_flag_;        // "--benchmark_out=TEMP" for Google Benchmark
  std::vector<char*> argv_;
};

}  // namespace trainmem
