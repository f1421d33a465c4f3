// main() for a fuzz target built without libFuzzer (TRAINMEM_FUZZ=OFF, e.g. with gcc): runs
// LLVMFuzzerTestOneInput once on each file named on the command line (a folder: on each file in
// it), as `fuzz_target FILE...` does under libFuzzer. ctest runs every target so on its seed
// corpus, so the corpus and any reproducer added to it are checked in every build.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

int run_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::cerr << path.string() << ": cannot open\n";
    return 1;
  }
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // A copy of exactly `size` bytes, as libFuzzer gives: reading past it is an error ASan can see.
  std::vector<std::uint8_t> input(bytes.begin(), bytes.end());
  LLVMFuzzerTestOneInput(input.data(), input.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int failures = 0;
  std::size_t inputs = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg = argv[i];
    if (std::filesystem::is_directory(arg)) {
      for (const auto& entry : std::filesystem::directory_iterator(arg))
        if (entry.is_regular_file()) failures += run_file(entry.path()), ++inputs;
    } else {
      failures += run_file(arg), ++inputs;
    }
  }
  std::cout << argv[0] << ": ran " << inputs << " inputs\n";
  return failures == 0 ? 0 : 1;
}
