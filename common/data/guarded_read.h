// Reading a memory-mapped file that another program may cut short.
//
// A read from a page of a file mapping that now lies past the file's end (the file was truncated
// after it was mapped) raises SIGBUS, whose default action ends the process without a word. A read
// made through read_guarded() gets `false` instead: a SIGBUS handler, installed once per process on
// first use, jumps (siglongjmp) back out of the read when the thread that faulted is inside
// read_guarded(). Any other SIGBUS goes to the action that was installed before (by default the
// process ends, as it would have without this file).
//
// The read is abandoned midway at the fault, so it must only read the mapping and write plain
// memory: no allocation, no lock, no object with a destructor (the jump would skip them).
#pragma once

namespace trainmem {

// Runs read(context). false: it raised SIGBUS and was abandoned.
bool read_guarded(void (*read)(void* context), void* context);

template <typename Read>
bool read_guarded(Read& read) {
  return read_guarded([](void* context) { (*static_cast<Read*>(context))(); }, &read);
}

}  // namespace trainmem
