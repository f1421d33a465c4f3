// A restricted reader of Python pickles: data only, never code. PyTorch writes its memory
// snapshots with pickle (`torch.cuda.memory._dump_snapshot`, protocols 2-5), and a snapshot may
// come from someone else. Python's pickle.load runs whatever the file names (a GLOBAL or
// STACK_GLOBAL imports any callable, REDUCE calls it: `os.system` is one opcode away), so this
// reader understands only the opcodes that build plain data:
//
//   None, True, False, ints (up to 64 bits), floats, str (UTF-8), bytes and bytearray, lists,
//   tuples, dicts, sets and frozensets, the memo (PUT/GET/MEMOIZE: one object referred to twice),
//   MARK, POP, DUP, PROTO, FRAME and STOP
//
// and refuses every other opcode with one line naming it and its byte offset: the ones that import
// or call (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ, NEWOBJ_EX, EXT1/2/4, PERSID,
// BINPERSID, NEXT_BUFFER, READONLY_BUFFER) as such, protocol 0/1's text forms of numbers and
// strings as not read (re-dump with protocol 2 or later). Nothing the file holds is ever executed.
//
// The result is JSON (nlohmann::json), the form the rest of trainmem reads: a tuple, a set and a
// frozenset become arrays, bytes a JSON binary value, a dict an object (its keys str, or ints and
// bools written as Python prints them; any other key is refused). An object the memo refers to
// several times is copied at each place (JSON has no references); one that contains itself is
// refused.
//
// Bounded, whatever the bytes: a length is checked against what is left of the input before
// anything is allocated for it, nesting deeper than Limits::max_depth is refused, and so is a result
// of more than Limits::max_values values (the memo can make a small file expand without bound:
// a list holding the same list twice, 60 levels deep). Time is linear in the input and the result;
// memory in the input (a node an opcode at most) and the result.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace trainmem {

// A pickle that cannot be read; the message is one line naming the byte offset (and the opcode).
struct PickleError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct PickleLimits {
  std::size_t max_depth = 256;           // nested containers
  std::size_t max_values = 64u << 20;    // values in the result, memo copies included
  std::uint64_t max_file_bytes = std::uint64_t{16} << 30;  // read_restricted_pickle_file only
};

// The object the pickle in `bytes` holds (its first, up to STOP). `source` names it in messages.
nlohmann::json read_restricted_pickle(std::string_view bytes, const std::string& source = "pickle",
                                      const PickleLimits& limits = {});

// The same for a file (read whole, at most limits.max_file_bytes). Throws PickleError, also for a
// file that cannot be read.
nlohmann::json read_restricted_pickle_file(const std::string& path, const PickleLimits& limits = {});

// Whether `bytes` start as a pickle of protocol 2 or later does (PROTO, then a protocol number):
// how a caller tells a pickled snapshot from a JSON one.
bool looks_like_pickle(std::string_view bytes);

}  // namespace trainmem
