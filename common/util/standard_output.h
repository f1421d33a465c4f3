// Standard output is a result too: `trainmem estimate --json > estimate.json` on a full disk must
// fail, not exit 0 leaving half a file. Call guard_standard_output() first thing in main and
// check_standard_output() when the work is done.
#pragma once

namespace trainmem {

// std::cout then writes straight to descriptor 1 and remembers the first error (the C library's
// stdout drops a buffer it could not write and forgets why). A standard stream that is closed
// (`>&-`) gets /dev/null opened the wrong way round in its place: no file the program opens
// later takes its number (progress lines in a result file), and writing to it still fails
// (EBADF) as writing to a closed descriptor does.
void guard_standard_output();

// Flushes std::cout and stdout; throws OutputFileError ("cannot write to standard output:
// <reason>") if anything written to them was lost.
void check_standard_output();

}  // namespace trainmem
